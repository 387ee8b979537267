"""The chat's prompt: a text area where Enter sends, and Shift+Enter or Ctrl+J starts a line.
↑ in an empty prompt asks the chat for the last question back, as a shell recalls a command.

A pasted text keeps its lines (a one-line Input kept only the first, silently). The area
grows with its text up to a few lines, then scrolls.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEW_LINE_KEYS = ("shift+enter", "ctrl+j")  # most terminals send Shift+Enter as Enter


class PromptArea(TextArea, inherit_bindings=False):
    DEFAULT_CSS = """
    PromptArea { height: auto; max-height: 8; }
    """
    # TextArea's keys but F6 (select the line) and F7 (select all), which switch screens: the
    # prompt's own F6 and F7, though overridden, put those two first in the chat's footer.
    # (From TextArea's merged map, where its cursor keys replace the scroll keys it inherits.)
    BINDINGS = [
        binding
        for bindings in TextArea._merge_bindings().key_to_bindings.values()
        for binding in bindings
        if binding.key not in ("f6", "f7")
    ]

    @dataclass
    class Submitted(Message):
        """Enter: the prompt's whole text, lines and all."""

        area: PromptArea
        value: str

        @property
        def control(self) -> PromptArea:
            return self.area

    @dataclass
    class RecallLast(Message):
        """↑ in an empty prompt: the chat puts the last question back, to edit."""

        area: PromptArea

        @property
        def control(self) -> PromptArea:
            return self.area

    def __init__(self, *, placeholder: str = "", id: str | None = None) -> None:
        super().__init__(
            id=id, placeholder=placeholder, soft_wrap=True, compact=True,
            highlight_cursor_line=False, tab_behavior="focus",
        )  # fmt: skip

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
        elif event.key == "up" and not self.text:
            event.stop()
            event.prevent_default()
            self.post_message(self.RecallLast(self))
        elif event.key in NEW_LINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
        else:
            await super()._on_key(event)
