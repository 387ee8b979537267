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
    saved(store, "汉字的标题" * 8)  # two cells a character
    saved(store, "Write a Python function that adds two numbers, in a code block, please")
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        modal = ChatsModal(store)
        await app.push_screen(modal)
        await pilot.pause()
        table = modal.query_one("#chats", DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        for row in range(2):
            title, when, turns = table.get_row_at(row)
            assert title.endswith("…") and when and turns == 1


async def test_a_chat_deleted_while_open_is_saved_anew_once(tmp_path) -> None:
    """A failed turn (asked again, stopped before its first token) saved a deleted open chat
    anew without the screen knowing, and its next reply saved it a second time (review)."""
    from infertui.tui.screens.chat import ChatScreen
    from infertui.tui.widgets.message import UserMessage

    store = ChatStore(tmp_path / "chats")
    open_chat = saved(store, "first")
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.store, chat.saved = store, open_chat
        chat.history = [*open_chat.messages, ChatMessage(role="user", content="again?")]
        store.delete(open_chat.id)  # from the list (Ctrl+T, d)
        chat.record(chat.history, open_chat, UserMessage("again?"), "", "m", "host")
        assert store.list() == []  # failed: nothing to save, and the deletion holds
        chat.history.append(ChatMessage(role="user", content="and now?"))
        chat.record(chat.history, chat.saved, UserMessage("and now?"), "Yes.", "m", "host")
        (anew,) = store.list()
        assert anew.id != open_chat.id and len(anew.messages) == 4


async def test_a_context_note_for_a_chat_no_longer_shown_is_not_mounted(tmp_path) -> None:
    """A question past the context, whose chat was replaced (Ctrl+N, a resume) before the
    host said so: its note went to mount before a question no longer there, and the error
    ended the app (review). Its note now goes with its chat."""
    import asyncio
    from collections.abc import AsyncIterator

    from infertui.core.client import ChatReply
    from infertui.core.protocol import ErrorKind, InferError
    from infertui.tui.screens.chat import ChatScreen

    from .scripted import ScriptedReply

    said = asyncio.Event()
    go_on = asyncio.Event()

    class Overflow(ChatReply):
        request_id = "r0"

        async def __aiter__(self) -> AsyncIterator[str]:
            said.set()
            await go_on.wait()
            raise InferError(ErrorKind.CONTEXT_OVERFLOW, "past the context")
            yield ""  # (an async generator)

        def abort(self) -> None:
            pass

    app = ScriptedClientApp(Settings())
    replies: list[ChatReply] = [Overflow(), ScriptedReply()]
    app.scripted.chat = lambda *args, **kwargs: replies.pop(0)  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.store = ChatStore(tmp_path / "chats")
        chat.history = [ChatMessage(role="user", content="old"),
                        ChatMessage(role="assistant", content="Yes.")]  # fmt: skip
        chat.query_one("#prompt").text = "new?"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await asyncio.wait_for(said.wait(), 10)
        await chat.start_over()  # another chat on screen before the host answers
        go_on.set()
        for _ in range(100):
            if not replies:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        assert app.is_running and not replies  # asked again without its oldest turn
        assert not chat.query(".context-note")  # nothing said into the new chat
