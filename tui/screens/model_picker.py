"""Which model the chat asks: the host's default, one of its engines, or a model of its library
that is not loaded (the first message loads it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from infertui.core.protocol import LibraryEntry

from ..widgets.tables import said_size
from .forms import FormModal

DEFAULT = ""  # the option id of "whatever the host's default is"


@dataclass(frozen=True)
class ModelChoice:
    """What the picker chose: an engine id, or None for the host's default."""

    model: str | None


class ModelPicker(FormModal[ModelChoice | None]):
    """Lists the host's engines, then its library's models that are not loaded; Enter picks
    one, Escape keeps the current choice (None)."""

    def __init__(
        self,
        models: tuple[str, ...],
        default: str,
        current: str | None,
        library: Sequence[LibraryEntry] = (),
    ) -> None:
        super().__init__()
        self.models, self.default, self.current = models, default, current
        self.library = [entry for entry in library if entry.name not in models]

    def compose(self) -> ComposeResult:
        options = [Option(f"The host's default ({self.default or 'none loaded'})", id=DEFAULT)]
        options += [Option(model, id=model) for model in self.models]
        options += [Option(_unloaded(entry), id=entry.name) for entry in self.library]
        picker = OptionList(*options, id="models", compact=True)
        ids = [DEFAULT, *self.models, *(entry.name for entry in self.library)]
        picker.highlighted = ids.index(self.current) if self.current in ids else 0
        with Vertical(id="dialog"):
            yield Label("Ask which model?", classes="title")
            yield picker

    @on(OptionList.OptionSelected, "#models")
    def pick(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(ModelChoice(event.option.id or None))


def _unloaded(entry: LibraryEntry) -> str:
    """A library model not in memory: its name, size, and that the first message loads it."""
    details = " ".join(part for part in (entry.parameters, entry.quantization) if part)
    size = said_size(entry.size)
    name = escape(entry.name)
    return f"{name}  [dim]{details} · {size} · not loaded: the first message loads it[/]"
