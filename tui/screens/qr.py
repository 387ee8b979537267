"""The server ID as a QR code, for a phone or a second screen to pick up."""

from __future__ import annotations

import io

import segno
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static


def qr_text(data: str) -> str:
    buffer = io.StringIO()
    segno.make(data, error="l").terminal(out=buffer, compact=True, border=1)
    return buffer.getvalue()


class QrModal(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss", "Close", id="qr.close")]

    def __init__(self, server_id: str) -> None:
        super().__init__()
        self.server_id = server_id

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="qr"):
            # dark modules on a light ground, whatever the terminal's theme: scanners want that
            yield Static(Text(qr_text(self.server_id), style="black on white"), id="qr")
            yield Label(self.server_id)
