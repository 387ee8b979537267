"""What the app's dialogs share: Cancel and Escape dismiss with None; errors show in place."""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError
from textual import on
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Button, Static

T = TypeVar("T")


class FormModal(ModalScreen[T]):
    """A dialog whose Cancel button and Escape dismiss it with None; subclasses submit."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="form.cancel")]

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)

    def show_error(self, text: str) -> None:
        self.query_one("#form-error", Static).update(text)


def first_problem(err: ValidationError) -> str:
    problem = err.errors()[0]
    return f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}"
