"""Saved conversations on disk: written whole, listed newest first, renamed, deleted,
exported; a damaged file is skipped, and an id is never a path."""

from __future__ import annotations

import json

import pytest

from infertui.core.client.chats import ChatStore, SavedChat
from infertui.core.protocol.common import ChatMessage


def chat(first: str) -> SavedChat:
    saved = SavedChat.start(first, host="http://127.0.0.1:8080")
    saved.messages = [ChatMessage(role="user", content=first),
                      ChatMessage(role="assistant", content="Red, green\nand blue.")]  # fmt: skip
    saved.model = "smollm2-135m"
    return saved


def test_saved_chats_round_trip_newest_first(tmp_path) -> None:
    store = ChatStore(tmp_path / "chats")
    older, newer = chat("Name three colours."), chat("x" * 200)
    store.save(older)
    store.save(newer)
    (tmp_path / "chats" / "broken.json").write_text("{not json")
    listed = store.list()
    assert [c.id for c in listed] == [newer.id, older.id]  # the broken file is skipped
    assert listed[0].title.endswith("…") and len(listed[0].title) == 60
    assert store.load(older.id).messages == older.messages
    assert store.rename(older.id, "  colours  ").title == "colours"
    assert [c.id for c in store.list()] == [newer.id, older.id]  # a rename is not a new turn
    store.delete(newer.id)
    assert [c.title for c in store.list()] == ["colours"]
    assert not list((tmp_path / "chats").glob(".*.tmp"))  # written whole


def test_exports_are_markdown_and_json(tmp_path) -> None:
    store = ChatStore(tmp_path / "chats")
    saved = chat("Name three colours.")
    markdown = store.export(saved, "md", tmp_path).read_text()
    assert markdown.startswith("# Name three colours.")
    assert "## You\n\nName three colours." in markdown
    assert "## smollm2-135m\n\nRed, green\nand blue." in markdown
    data = json.loads(store.export(saved, "json", tmp_path).read_text())
    assert data["messages"][1]["content"] == "Red, green\nand blue."


def test_a_chat_id_is_never_a_path(tmp_path) -> None:
    store = ChatStore(tmp_path / "chats")
    for bad in ("../secret", "a/b", ""):
        with pytest.raises(ValueError, match="not a chat id"):
            store.load(bad)


def test_without_oldest_turn_steps_to_the_next_question_and_keeps_the_last() -> None:
    from infertui.core.protocol.common import without_oldest_turn

    roles = ["user", "assistant", "user", "assistant", "assistant", "user"]
    history = [ChatMessage(role=r, content=str(i)) for i, r in enumerate(roles)]  # type: ignore[arg-type]
    assert without_oldest_turn(history, 0) == 2
    assert without_oldest_turn(history, 2) == 5  # an exchange goes whole, however long
    assert without_oldest_turn(history, 5) is None  # the question asked now always stays
