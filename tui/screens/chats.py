"""Saved conversations: resume, rename, delete, and export as Markdown or JSON."""

from __future__ import annotations

import time
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, DataTable, Input, Label, Static

from infertui.core.client.chats import ChatStore, SavedChat

from ..widgets.footer import KeysFooter
from ..widgets.tables import cleared, head_cells
from .forms import ConfirmModal, FormModal

# The title's column in the 72-wide dialog, beside "when" and "turns": a longer title pushed
# those two out of sight.
TITLE_WIDTH = 42


class ChatsModal(FormModal[SavedChat | None]):
    """The saved chats, newest first; Enter resumes one (dismissing with it)."""

    BINDINGS = [
        Binding("r", "rename", "Rename", id="chats.rename"),
        Binding("d", "delete", "Delete", id="chats.delete"),
        Binding("m", "export('md')", "Export .md", id="chats.export_md"),
        Binding("j", "export('json')", "Export .json", id="chats.export_json"),
    ]

    def __init__(self, store: ChatStore, export_to: Path | None = None) -> None:
        super().__init__()
        self.store = store
        self.export_to = export_to or Path.cwd()
        self.chats: list[SavedChat] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="chats"):
            yield Label("Saved chats · Enter resumes · Esc closes", classes="title")
            yield DataTable(id="chats", cursor_type="row", zebra_stripes=True)
            yield Static("", id="form-error", markup=False)
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one("#chats", DataTable)
        table.add_column("title", width=TITLE_WIDTH)
        table.add_columns("when", "turns")
        self.show()

    def show(self) -> None:
        """The list anew, the cursor on the row it was on."""
        table = self.query_one("#chats", DataTable)
        row = table.cursor_row
        cleared(table)
        self.chats = self.store.list()
        for chat in self.chats:
            when = time.strftime("%m-%d %H:%M", time.localtime(chat.updated))
            title = head_cells(chat.title, TITLE_WIDTH)
            table.add_row(title, when, len(chat.messages) // 2, key=chat.id)
        if not self.chats:
            self.show_error("No saved chats yet: each reply saves its conversation.")
        elif row:
            table.move_cursor(row=min(row, len(self.chats) - 1))

    def selected(self) -> SavedChat | None:
        table = self.query_one("#chats", DataTable)
        return self.chats[table.cursor_row] if self.chats else None

    @on(DataTable.RowSelected, "#chats")
    def resume(self) -> None:
        self.dismiss(self.selected())

    def action_rename(self) -> None:
        chat = self.selected()
        if chat is None:
            return

        def renamed(title: str | None) -> None:
            if title:
                self.store.rename(chat.id, title)
                self.show()  # (a rename keeps the list's order: the cursor stays on it)

        self.app.push_screen(RenameModal(chat.title), renamed)

    def action_delete(self) -> None:
        chat = self.selected()
        if chat is None:
            return

        def delete(yes: bool | None) -> None:
            if yes:
                self.store.delete(chat.id)
                self.show()

        self.app.push_screen(ConfirmModal(f"Delete the chat '{chat.title}'? (y / Esc)"), delete)

    def action_export(self, kind: str) -> None:
        chat = self.selected()
        if chat is None:
            return
        path = self.store.export(chat, "md" if kind == "md" else "json", self.export_to)
        self.show_error(f"Written to {path}")
        self.notify(f"Exported to {path}")


class RenameModal(FormModal[str | None]):
    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_now = title

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Rename the chat", classes="title")
            yield Input(self.title_now, id="title", compact=True)
            yield from self.footer("Rename", "rename")

    @on(Button.Pressed, "#rename")
    @on(Input.Submitted)
    def rename(self) -> None:
        self.dismiss(self.query_one("#title", Input).value.strip() or None)
