"""Which of the host's engines the chat asks: the host's default, or one by name."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from .forms import FormModal

DEFAULT = ""  # the option id of "whatever the host's default is"


@dataclass(frozen=True)
class ModelChoice:
    """What the picker chose: an engine id, or None for the host's default."""

    model: str | None


class ModelPicker(FormModal[ModelChoice | None]):
    """Lists the host's engines; Enter picks one, Escape keeps the current choice (None)."""

    def __init__(self, models: tuple[str, ...], default: str, current: str | None) -> None:
        super().__init__()
        self.models, self.default, self.current = models, default, current

    def compose(self) -> ComposeResult:
        options = [Option(f"The host's default ({self.default or 'none loaded'})", id=DEFAULT)]
        options += [Option(model, id=model) for model in self.models]
        picker = OptionList(*options, id="models", compact=True)
        ids = [DEFAULT, *self.models]
        picker.highlighted = ids.index(self.current) if self.current in ids else 0
        with Vertical(id="dialog"):
            yield Label("Ask which model?", classes="title")
            yield picker

    @on(OptionList.OptionSelected, "#models")
    def pick(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(ModelChoice(event.option.id or None))
