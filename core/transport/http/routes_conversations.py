"""OpenAI's Conversations API: `/v1/conversations` and its items, kept in memory beside the
kept responses (response_store.py), for `client.conversations` and the Agents SDK's
server-side sessions. A response created with `conversation` reads its items and adds to
them (routes_responses.py). With API keys, a conversation is its key's, as a response is.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request

from ...protocol.conversations import (
    MAX_PAGE,
    ConversationCreate,
    ConversationDeleted,
    ConversationObject,
    ConversationUpdate,
    ItemList,
    ItemsCreate,
    item_page,
)
from ...protocol.errors import ErrorKind, InferError
from ...protocol.openai_replies import ErrorEnvelope
from ...protocol.responses import check_items
from .access import access_of
from .dialects import documented_errors
from .response_store import Conversation, ConversationStore
from .routing import StrictJSONRoute

router = APIRouter(
    tags=["OpenAI Conversations"], route_class=StrictJSONRoute,
    responses=documented_errors(ErrorEnvelope),
)  # fmt: skip

Order = Literal["asc", "desc"]


def conversation_store(request: Request) -> ConversationStore:
    store: ConversationStore = request.app.state.conversations
    return store


def kept_conversation(
    request: Request, conversation_id: str, param: str = "conversation_id"
) -> Conversation:
    """A kept conversation the caller may use: its owner's, or an admin's; else a 404."""
    conversation = conversation_store(request).find(conversation_id)
    if conversation is None:
        raise InferError(
            ErrorKind.NOT_FOUND,
            f"no conversation '{conversation_id}' is kept here (conversations last until the "
            "host restarts or needs the room)",
            param=param,
        )
    access_of(request).check_owner(request, conversation.owner, f"conversation '{conversation_id}'")
    return conversation


def _object(conversation: Conversation) -> ConversationObject:
    return ConversationObject(
        id=conversation.id, created_at=conversation.created_at, metadata=conversation.metadata
    )


@router.post("/v1/conversations", response_model=ConversationObject, summary="A new conversation")
async def create_conversation(body: ConversationCreate, request: Request) -> ConversationObject:
    items = body.items or []
    check_items(items, "items")
    store = conversation_store(request)
    conversation = store.create(body.metadata or {}, access_of(request).owner(request))
    try:
        store.add(conversation, items)
    except InferError:
        store.delete(conversation.id)
        raise
    return _object(conversation)


@router.get("/v1/conversations/{conversation_id}", response_model=ConversationObject)
async def get_conversation(conversation_id: str, request: Request) -> ConversationObject:
    return _object(kept_conversation(request, conversation_id))


@router.post(
    "/v1/conversations/{conversation_id}",
    response_model=ConversationObject,
    summary="Replace a conversation's metadata",
)
async def update_conversation(
    conversation_id: str, body: ConversationUpdate, request: Request
) -> ConversationObject:
    conversation = kept_conversation(request, conversation_id)
    conversation_store(request).set_metadata(conversation, body.metadata or {})
    return _object(conversation)


@router.delete("/v1/conversations/{conversation_id}", response_model=ConversationDeleted)
async def delete_conversation(conversation_id: str, request: Request) -> ConversationDeleted:
    kept_conversation(request, conversation_id)  # its owner's to delete
    conversation_store(request).delete(conversation_id)
    return ConversationDeleted(id=conversation_id)


@router.get(
    "/v1/conversations/{conversation_id}/items",
    response_model=ItemList,
    summary="A page of a conversation's items (desc: newest first); `after` an id pages on",
)
async def list_items(
    conversation_id: str,
    request: Request,
    after: str | None = None,
    limit: int = Query(20, ge=1, le=MAX_PAGE),
    order: Order = "desc",
) -> ItemList:
    conversation = kept_conversation(request, conversation_id)
    page = item_page(conversation.items, after=after, limit=limit, order=order)
    if page is None:
        raise InferError(
            ErrorKind.NOT_FOUND, f"no item '{after}' in conversation '{conversation_id}'",
            param="after",
        )  # fmt: skip
    return page


@router.post(
    "/v1/conversations/{conversation_id}/items",
    response_model=ItemList,
    summary="Add up to 20 items to a conversation; the items as kept, with their ids",
)
async def add_items(conversation_id: str, body: ItemsCreate, request: Request) -> ItemList:
    conversation = kept_conversation(request, conversation_id)
    check_items(body.items, "items")
    added = conversation_store(request).add(conversation, body.items)
    return ItemList(data=added, first_id=added[0]["id"], last_id=added[-1]["id"], has_more=False)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(conversation_id: str, item_id: str, request: Request) -> dict[str, object]:
    conversation = kept_conversation(request, conversation_id)
    for item in conversation.items:
        if item.get("id") == item_id:
            return item
    raise _no_item(conversation_id, item_id)


@router.delete(
    "/v1/conversations/{conversation_id}/items/{item_id}",
    response_model=ConversationObject,
    summary="Remove an item; the conversation back",
)
async def delete_item(conversation_id: str, item_id: str, request: Request) -> ConversationObject:
    conversation = kept_conversation(request, conversation_id)
    if not conversation_store(request).remove_item(conversation, item_id):
        raise _no_item(conversation_id, item_id)
    return _object(conversation)


def _no_item(conversation_id: str, item_id: str) -> InferError:
    return InferError(
        ErrorKind.NOT_FOUND, f"no item '{item_id}' in conversation '{conversation_id}'",
        param="item_id",
    )  # fmt: skip
