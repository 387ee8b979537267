"""Saved conversations: one JSON file each under the data directory's `chats/`, written
whole on every change (a temporary file, then a rename: a crash never leaves half a chat).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from .. import paths
from ..protocol.common import ChatMessage

log = logging.getLogger(__name__)

TITLE_CHARS = 60


class SavedChat(BaseModel):
    id: str = Field(pattern=r"^[0-9a-z-]{1,64}$")
    title: str
    created: float
    updated: float
    host: str = ""  # the server ID or URL it was held with
    model: str = ""  # the engine that answered last
    messages: list[ChatMessage] = Field(default_factory=list)

    @classmethod
    def start(cls, first_words: str, host: str = "") -> SavedChat:
        now = time.time()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        return cls(
            id=f"{stamp}-{secrets.token_hex(2)}", title=title_of(first_words),
            created=now, updated=now, host=host,
        )  # fmt: skip

    def as_markdown(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.created))
        parts = [f"# {self.title}", "", f"_{when} · {self.host or 'host'} · {self.model}_", ""]
        for message in self.messages:
            who = {"user": "You", "assistant": self.model or "Assistant"}.get(
                message.role, message.role.capitalize()
            )
            parts += [f"## {who}", "", message.content, ""]
        return "\n".join(parts)


def title_of(words: str) -> str:
    line = " ".join(words.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


class ChatStore:
    """The saved conversations in a folder (default: <data dir>/chats)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or paths.data_dir() / "chats"

    def list(self) -> list[SavedChat]:
        """Newest first; a file that does not parse is skipped (and logged), never fatal."""
        chats = []
        for file in self.folder.glob("*.json"):
            try:
                chats.append(SavedChat.model_validate_json(file.read_bytes()))
            except (OSError, ValidationError) as err:
                log.warning("skipping saved chat %s: %s", file.name, str(err).splitlines()[0])
        return sorted(chats, key=lambda chat: chat.updated, reverse=True)

    def save(self, chat: SavedChat, *, touched: bool = True) -> None:
        """Write the chat whole; `touched`: as updated now (a new turn, not a rename)."""
        if touched:
            chat.updated = time.time()
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f".{chat.id}.json.tmp"
        temporary.write_text(chat.model_dump_json(indent=1))
        os.replace(temporary, self._file(chat.id))

    def load(self, chat_id: str) -> SavedChat:
        return SavedChat.model_validate_json(self._file(chat_id).read_bytes())

    def rename(self, chat_id: str, title: str) -> SavedChat:
        chat = self.load(chat_id)
        chat.title = title_of(title) or chat.title
        self.save(chat, touched=False)  # (a rename does not move it up the list)
        return chat

    def delete(self, chat_id: str) -> None:
        self._file(chat_id).unlink(missing_ok=True)

    def export(self, chat: SavedChat, kind: Literal["md", "json"], folder: Path) -> Path:
        """Write the chat as Markdown or JSON into `folder`; the file's path."""
        target = folder / f"infertui-chat-{chat.id}.{kind}"
        if kind == "md":
            target.write_text(chat.as_markdown())
        else:
            target.write_text(json.dumps(chat.model_dump(), indent=1, ensure_ascii=False))
        return target

    def _file(self, chat_id: str) -> Path:
        if not chat_id.replace("-", "").isalnum():  # an id, never a path
            raise ValueError(f"not a chat id: {chat_id!r}")
        return self.folder / f"{chat_id}.json"
