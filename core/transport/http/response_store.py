"""Responses kept for `previous_response_id` and `GET /v1/responses/{id}`.

A response asked with `store` (OpenAI's default) is kept once it ends, with its conversation:
the input items of the responses it continues, its own, and its output as items. A request
naming it as `previous_response_id` reads that conversation before its own input, as OpenAI's
does (and the engine reads again only what is new: the KV cells of the turns before are
kept). Kept in memory, in the order they ended, until the host stops or needs the room:
MAX_CHARS of conversation text in all, the oldest going first. A response is its owner's
(the API key that asked for it, see access.py), as a task is.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

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
        added = [*inputs, *([i.model_dump(mode="json") for i in response.output] or [_NOTHING])]
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
        self._kept[response.id] = StoredResponse(response, conversation, owner, chain_chars, size)
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
