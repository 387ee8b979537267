"""What the app's dialogs share: Cancel and Escape dismiss with None; errors show in place."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from pydantic import ValidationError
from textual import on
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Static
from textual.widgets.button import ButtonVariant

T = TypeVar("T")


class FormModal(ModalScreen[T]):
    """A dialog whose Cancel button and Escape dismiss it with None; subclasses submit."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="form.cancel")]

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)

    def footer(
        self, label: str, button_id: str, variant: ButtonVariant = "primary"
    ) -> Iterator[Widget]:
        """The error line, then the submit and Cancel buttons, the same in every dialog."""
        yield Static("", id="form-error", classes="error", markup=False)
        yield Horizontal(
            Button(label, variant=variant, id=button_id, compact=True),
            Button("Cancel", id="cancel", compact=True),
            classes="buttons",
        )

    def show_error(self, text: str) -> None:
        self.query_one("#form-error", Static).update(text)


def first_problem(err: ValidationError) -> str:
    problem = err.errors()[0]
    return f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}"
