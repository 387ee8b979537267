"""The conversation's options: system prompt and sampling, edited in place."""

from __future__ import annotations

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Button, Input, Label, TextArea

from infertui.core.config import ClientSettings, first_problem

from .forms import FormModal


class OptionsModal(FormModal[ClientSettings | None]):
    BINDINGS = [Binding("ctrl+s", "save", "Apply", id="options.apply")]

    def __init__(self, current: ClientSettings) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        c = self.current
        with Vertical(id="dialog"):
            yield Label("Conversation options", classes="title")
            yield Label("System prompt")
            yield TextArea(c.system_prompt, id="system_prompt", soft_wrap=True, compact=True)
            with Grid(id="form"):
                yield Label("temperature (0: greedy)")
                yield Input(_shown(c.temperature), placeholder="model's own", id="temperature",
                            type="number", compact=True)  # fmt: skip
                yield Label("top p (0 – 1)")
                yield Input(_shown(c.top_p), placeholder="model's own", id="top_p",
                            type="number", compact=True)  # fmt: skip
                yield Label("max tokens")
                yield Input(_shown(c.max_tokens), placeholder="to the context", id="max_tokens",
                            type="integer", compact=True)  # fmt: skip
            yield from self.footer("Apply", "apply")

    @on(Button.Pressed, "#apply")
    @on(Input.Submitted)
    def action_save(self) -> None:
        fields = {i.id: i.value for i in self.query(Input) if i.id}
        fields["system_prompt"] = self.query_one("#system_prompt", TextArea).text
        try:
            self.dismiss(ClientSettings.model_validate({**self.current.model_dump(), **fields}))
        except ValidationError as err:
            self.show_error(first_problem(err))


def _shown(value: float | None) -> str:  # an int is a float to the type checker
    """An option as its field shows it: empty where the model's own value applies."""
    return "" if value is None else str(value)
