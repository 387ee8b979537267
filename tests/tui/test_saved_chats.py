"""The saved chats' list (Ctrl+T): a key acts on the chat the cursor is on, after a rename
too (a helper's walkthrough renamed the third chat, and `d` then offered to delete another)."""

from __future__ import annotations

from infertui.core.client.chats import ChatStore, SavedChat
from infertui.core.config import Settings
from infertui.core.protocol.common import ChatMessage
from infertui.tui.screens.chats import ChatsModal, RenameModal

from .scripted import ScriptedClientApp


def saved(store: ChatStore, first: str) -> SavedChat:
    chat = SavedChat.start(first, host="http://127.0.0.1:8080")
    chat.messages = [ChatMessage(role="user", content=first),
                     ChatMessage(role="assistant", content="Yes.")]  # fmt: skip
    store.save(chat)
    return chat


async def test_the_cursor_stays_on_a_renamed_chat_and_the_list_keeps_its_order(tmp_path) -> None:
    store = ChatStore(tmp_path / "chats")
    for first in ("oldest", "middle", "newest"):
        saved(store, first)
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        modal = ChatsModal(store)
        await app.push_screen(modal)
        await pilot.press("down", "down")
        assert modal.selected() is not None and modal.selected().title == "oldest"  # type: ignore[union-attr]
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RenameModal)
        app.screen.query_one("#title").value = "renamed"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is modal
        assert [c.title for c in modal.chats] == ["newest", "middle", "renamed"]
        chosen = modal.selected()
        assert chosen is not None and chosen.title == "renamed"


async def test_a_long_title_leaves_room_for_when_and_turns(tmp_path) -> None:
    """A title of 60 characters pushed the "when" and "turns" columns out of the dialog (a
    helper's walkthrough): the title is shortened to its column."""
    from textual.widgets import DataTable

    store = ChatStore(tmp_path / "chats")
    saved(store, "Write a Python function that adds two numbers, in a code block, please")
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        modal = ChatsModal(store)
        await app.push_screen(modal)
        await pilot.pause()
        table = modal.query_one("#chats", DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        title, when, turns = table.get_row_at(0)
        assert title.endswith("…") and when and turns == 1
