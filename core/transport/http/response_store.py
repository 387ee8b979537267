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

from ...protocol.errors import ErrorKind, InferError
from ...protocol.responses import ResponseObject

MAX_CHARS = 32_000_000  # of JSON-encoded conversation, in all the kept responses


@dataclass(frozen=True)
class StoredResponse:
    response: ResponseObject
    conversation: list[dict[str, Any]]  # input items, the response's output last
    owner: str | None
    size: int


class ResponseStore:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._kept: OrderedDict[str, StoredResponse] = OrderedDict()
        self._chars = 0

    def put(
        self, response: ResponseObject, inputs: list[dict[str, Any]], owner: str | None
    ) -> None:
        """Keep an ended response, whose request read `inputs` (the ones it continued, then
        its own), making room as needed. One bigger than the whole store is not kept."""
        output = [item.model_dump(mode="json") for item in response.output]
        conversation = [*inputs, *output]
        size = len(json.dumps(conversation, ensure_ascii=False))
        if size > self._max_chars:
            return
        self.delete(response.id)
        while self._chars + size > self._max_chars:
            _, oldest = self._kept.popitem(last=False)
            self._chars -= oldest.size
        self._kept[response.id] = StoredResponse(response, conversation, owner, size)
        self._chars += size

    def get(self, response_id: str, param: str = "response_id") -> StoredResponse:
        try:
            return self._kept[response_id]
        except KeyError:
            raise InferError(
                ErrorKind.NOT_FOUND,
                f"no response '{response_id}' is kept here (stored responses last until "
                "the host restarts or needs the room)",
                param=param,
            ) from None

    def delete(self, response_id: str) -> bool:
        stored = self._kept.pop(response_id, None)
        if stored is None:
            return False
        self._chars -= stored.size
        return True

    def __len__(self) -> int:
        return len(self._kept)
