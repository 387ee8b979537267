"""What the app's dialogs share: Cancel and Escape dismiss with None; errors show in place;
a yes/no question."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Label, Static
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


class ConfirmModal(ModalScreen[bool]):
    """A yes/no question: y or Yes answers True; Escape or No, False."""

    BINDINGS = [
        Binding("escape", "dismiss(False)", "No", id="confirm.no"),
        Binding("y", "dismiss(True)", "Yes", id="confirm.yes"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, classes="title")
            with Horizontal(classes="buttons"):
                yield Button("Yes", variant="error", id="yes", compact=True)
                yield Button("No", id="no", compact=True)

    @on(Button.Pressed)
    def answer(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
