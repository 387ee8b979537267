"""OpenAI's Conversations API (`/v1/conversations`), and the item lists it shares with
`GET /v1/responses/{id}/input_items`: what the Agents SDK's server-side sessions
(`OpenAIConversationsSession`) and `client.conversations` send and read.

A conversation is a list of items (messages, function calls and their outputs, as a
Responses request's `input` has them), each with an id; a response created with
`conversation` reads them before its own input and adds its input and output after them.
Items are kept as they are given, with an id, a status and message text as content parts
added where missing, so that they read back in the shapes OpenAI's SDKs parse.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_NEW_ITEMS = 20  # items one create call adds, as OpenAI's limit
MAX_PAGE = 100  # items one list call returns

# OpenAI's metadata: up to 16 pairs, keys of 64 characters, values of 512
Metadata = Annotated[
    dict[
        Annotated[str, StringConstraints(max_length=64)],
        Annotated[str, StringConstraints(max_length=512)],
    ],
    Field(max_length=16),
]
Items = Annotated[list[dict[str, Any]], Field(max_length=MAX_NEW_ITEMS)]

# an item's id begins as OpenAI's do
_PREFIX = {
    "message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
}  # fmt: skip


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: Items | None = Field(None, description="its first items (up to 20)")
    metadata: Metadata | None = None


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metadata: Metadata | None = Field(description="replaces the conversation's metadata")


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_NEW_ITEMS)]


class ConversationObject(BaseModel):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int = Field(default_factory=lambda: int(time.time()))
    metadata: dict[str, str] = Field(default_factory=dict)


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class ItemList(BaseModel):
    """A page of items, in OpenAI's list shape: `after` the last id pages on."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


def new_conversation_id() -> str:
    return f"conv_{uuid.uuid4().hex}"


def stored_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as it is kept and listed: with its type, an id (a new one where it has none)
    and a status; a message's text content as one input_text part (output_text for the
    assistant's), the only shape OpenAI lists messages in."""
    kind = item.get("type", "message")
    kept = {**item, "type": kind}
    kept.setdefault("id", f"{_PREFIX.get(kind, 'item')}_{uuid.uuid4().hex}")
    if kind != "reasoning":
        kept.setdefault("status", "completed")
    if kind == "message" and isinstance(item.get("content"), str):
        assistant = item.get("role") == "assistant"
        part: dict[str, Any] = {"type": "output_text" if assistant else "input_text"}
        part["text"] = item["content"]
        if assistant:
            part["annotations"] = []
        kept["content"] = [part]
    return kept


def item_page(
    items: list[dict[str, Any]], *, after: str | None, limit: int, order: Literal["asc", "desc"]
) -> ItemList | None:
    """`limit` items from those after the one with id `after` (from the start without it),
    in `order` (desc: newest first, OpenAI's default); None when no item has that id."""
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        found = next((i for i, item in enumerate(ordered) if item.get("id") == after), None)
        if found is None:
            return None
        start = found + 1
    page = ordered[start : start + limit]
    return ItemList(
        data=page,
        first_id=page[0]["id"] if page else None,
        last_id=page[-1]["id"] if page else None,
        has_more=start + limit < len(ordered),
    )
