"""The screens' footer: Textual's, compact where the terminal is narrow."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

COMPACT_BELOW = 100  # columns; an SSH terminal's 80 cut the last keys at Textual's spacing


class KeysFooter(Footer):
    """Textual's footer of key bindings, without the spaces around each key below
    COMPACT_BELOW columns, where more of them fit (at 80, a client's dashboards show all
    theirs; the chat and the host's screens still lose their last ones)."""

    # Compact keys keep a margin to their right, the palette's key too: docked right, it then
    # left the last column to the keys scrolled under it (a stray letter at 80 columns).
    DEFAULT_CSS = """
    KeysFooter.-compact FooterKey.-command-palette { margin-right: 0; }
    """

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
