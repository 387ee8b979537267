"""Responses kept for `previous_response_id` and `GET /v1/responses/{id}`, and conversations
(`/v1/conversations`).

A response asked with `store` (OpenAI's default) is kept once it ends, with its conversation:
the input items of the responses it continues, its own, and its output as items. A request
naming it as `previous_response_id` reads that conversation before its own input, as OpenAI's
does (and the engine reads again only what is new: the KV cells of the turns before are
kept). Kept in memory, in the order they ended, until the host stops or needs the room:
MAX_CHARS of conversation text in all, the oldest going first. A response is its owner's
(the API key that asked for it, see access.py), as a task is.

A conversation is kept the same way, in a store of its own with the same bound: its items in
the order they were added (its own, and each response's input and output), the conversations
least recently used going first when room is needed.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...protocol.conversations import new_conversation_id, stored_item
from ...protocol.errors import ErrorKind, InferError
from ...protocol.responses import ResponseObject

MAX_CHARS = 32_000_000  # of JSON: the kept responses and their conversations, in all
# What a response whose reply was empty (a stream that ended at once) said: a turn all the same.
_NOTHING = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": ""}],
}


@dataclass(frozen=True)
class StoredResponse:
    response: ResponseObject
    conversation: list[dict[str, Any]]  # input items, the response's output last
    inputs: tuple[int, int]  # where the request's own input items are in it
    owner: str | None
    chain_chars: int  # the conversation's JSON, counted once per response that added to it
    size: int  # what it counts against MAX_CHARS: that and the response's own JSON


class ResponseStore:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._kept: OrderedDict[str, StoredResponse] = OrderedDict()
        self._chars = 0

    def put(
        self,
        response: ResponseObject,
        before: StoredResponse | None,
        inputs: list[dict[str, Any]],
        owner: str | None,
    ) -> None:
        """Keep an ended response: the conversation it continued (`before`'s), its request's
        own input items, its output. Room is made as needed; one bigger than the whole store
        is not kept. Only what this response adds is encoded: a chain costs linear work."""
        added = [*inputs, *output_items(response)]
        chain_chars = (before.chain_chars if before else 0) + len(
            json.dumps(added, ensure_ascii=False)
        )
        size = chain_chars + len(response.model_dump_json())
        if size > self._max_chars:
            return
        self.delete(response.id)
        while self._chars + size > self._max_chars:
            _, oldest = self._kept.popitem(last=False)
            self._chars -= oldest.size
        conversation = [*(before.conversation if before else []), *added]
        start = len(conversation) - len(added)
        own = (start, start + len(inputs))
        self._kept[response.id] = StoredResponse(
            response, conversation, own, owner, chain_chars, size
        )
        self._chars += size

    def find(self, response_id: str) -> StoredResponse | None:
        return self._kept.get(response_id)

    def delete(self, response_id: str) -> bool:
        stored = self._kept.pop(response_id, None)
        if stored is None:
            return False
        self._chars -= stored.size
        return True

    def __len__(self) -> int:
        return len(self._kept)


def output_items(response: ResponseObject) -> list[dict[str, Any]]:
    """A response's output as conversation items; an empty reply is an empty message."""
    made = [item.model_dump(mode="json") for item in response.output]
    return made or [{**_NOTHING, "id": f"msg_{response.id.removeprefix('resp_')}"}]


@dataclass
class Conversation:
    id: str
    owner: str | None
    metadata: dict[str, str]
    items: list[dict[str, Any]] = field(default_factory=list)
    created_at: int = field(default_factory=lambda: int(time.time()))
    chars: int = 0  # the JSON of its items and metadata, counted against MAX_CHARS


class ConversationStore:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._kept: OrderedDict[str, Conversation] = OrderedDict()
        self._chars = 0

    def create(self, metadata: dict[str, str], owner: str | None) -> Conversation:
        conversation = Conversation(new_conversation_id(), owner, metadata)
        self._kept[conversation.id] = conversation
        self._grow(conversation, _chars(metadata))
        return conversation

    def find(self, conversation_id: str) -> Conversation | None:
        """A kept conversation, now the most recently used."""
        conversation = self._kept.get(conversation_id)
        if conversation is not None:
            self._kept.move_to_end(conversation_id)
        return conversation

    def add(self, conversation: Conversation, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append items (each given an id where it has none); the items as kept. A
        conversation that would outgrow the whole store is refused, not emptied."""
        added = [stored_item(item) for item in items]
        self._grow(conversation, _chars(added))
        conversation.items += added
        return added

    def set_metadata(self, conversation: Conversation, metadata: dict[str, str]) -> None:
        self._grow(conversation, _chars(metadata) - _chars(conversation.metadata))
        conversation.metadata = metadata

    def remove_item(self, conversation: Conversation, item_id: str) -> bool:
        for i, item in enumerate(conversation.items):
            if item.get("id") == item_id:
                del conversation.items[i]
                self._grow(conversation, -_chars(item))
                return True
        return False

    def delete(self, conversation_id: str) -> bool:
        conversation = self._kept.pop(conversation_id, None)
        if conversation is None:
            return False
        self._chars -= conversation.chars
        return True

    def _grow(self, conversation: Conversation, chars: int) -> None:
        """Count `chars` more (or fewer) for the conversation, making room from the least
        recently used others."""
        if conversation.chars + chars > self._max_chars:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"conversation '{conversation.id}' would be over the host's limit of "
                f"{self._max_chars:,} characters of kept conversations; start a new one",
                param="items",
            )
        while self._chars + chars > self._max_chars:
            oldest = next(iter(self._kept))
            if oldest == conversation.id:  # never: it alone fits, checked above
                break
            self.delete(oldest)
        conversation.chars += chars
        self._chars += chars

    def __len__(self) -> int:
        return len(self._kept)


def _chars(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False))
