"""OpenAI's Responses API: `POST /v1/responses`, whole or as a stream of typed SSE events.

A request is served as the chat completion it means (protocol/responses.py), and its reply
goes out in the Responses shapes: a message item with one `output_text` part, or one
`function_call` item per call. Streamed, the events are the ones OpenAI's SDKs read:
`response.created`, `response.in_progress`, an item's `output_item.added`, its deltas and
`.done` events, then `response.completed` (`response.incomplete` when `max_output_tokens`
cut it, `response.failed` when the engine failed it). A reply that may be a tool call is
held back until it is known, as on the chat endpoint. An ended response is kept (unless the
request says `store: false`) for `previous_response_id`, `GET` and `DELETE
/v1/responses/{id}` and its `input_items`: response_store.py. A request with `conversation`
reads that conversation's items first, and adds its input and output to it once it ended
(routes_conversations.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from ...host.reply import reply
from ...protocol.conversations import MAX_PAGE, ItemList, item_page, stored_item
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Finished, TokenText
from ...protocol.openai_replies import ErrorEnvelope, ToolCallOut
from ...protocol.responses import (
    DeletedResponse,
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseError,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)
from ...protocol.tool_stream import CallDelta
from ...protocol.tool_use import ToolUse
from ...scheduler import Job
from .access import access_of
from .deps import collect, reply_limit, submit_all
from .dialects import documented_errors
from .response_store import Conversation, ResponseStore, StoredResponse, output_items
from .routes_conversations import conversation_store, kept_conversation
from .routes_openai import chat_job
from .routing import StrictJSONRoute
from .streams import HOLE, NUMBER_HOLE, LiveResponse, SseEvent, Template, sse_response

router = APIRouter(tags=["OpenAI Responses"], route_class=StrictJSONRoute)
log = logging.getLogger(__name__)

_SSE = {
    "content": {
        "text/event-stream": {
            "example": "event: response.output_text.delta\n"
            'data: {"type":"response.output_text.delta","delta":"Hi",...}\n\n'
        }
    }
}


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    responses={200: _SSE, **documented_errors(ErrorEnvelope)},
    summary="A model response; `stream: true` for typed SSE events",
)
async def create_response(
    body: ResponsesRequest, request: Request
) -> ResponseObject | LiveResponse:
    before, within = None, None
    if body.previous_response_id is not None:
        before = _kept(request, body.previous_response_id, continued=True)
    if (conversation_id := body.conversation_id) is not None:
        within = kept_conversation(request, conversation_id, param="conversation")
    context = before.conversation if before else list(within.items) if within else []
    limit = reply_limit(request, body.max_output_tokens)  # None: until the context ends
    asked, use = chat_job(body.as_chat(context), limit)
    asked = replace(asked, drop_oldest=body.truncation == "auto")  # OpenAI's context policy
    [job] = await submit_all(request, [asked])
    started = ResponseObject.started(
        body, f"resp_{job.id}", job.pool_id, int(time.time()), conversation_id
    )
    keep = _keeper(request, body, before, within)
    if body.stream:
        return sse_response(_Stream(job, started, use, keep).events())
    [(text, final)] = await collect(request, job)
    cut = final.finish_reason == "length"
    calls = use.final_calls(text, cut)
    items: list[OutputItem] = [_call_item(call) for call in calls] or [
        OutputMessage(id=f"msg_{job.id}", content=[OutputText(text=text)])
    ]
    if cut:  # the last item is the one max_output_tokens cut short
        items[-1] = items[-1].model_copy(update={"status": "incomplete"})
    return keep(_ended(started, job, final, items))


@router.get(
    "/v1/responses/{response_id}",
    response_model=ResponseObject,
    responses=documented_errors(ErrorEnvelope),
    summary="A kept response, as it ended",
)
async def get_response(response_id: str, request: Request) -> ResponseObject:
    return _kept(request, response_id).response


@router.delete(
    "/v1/responses/{response_id}",
    response_model=DeletedResponse,
    responses=documented_errors(ErrorEnvelope),
    summary="Forget a kept response",
)
async def delete_response(response_id: str, request: Request) -> DeletedResponse:
    _kept(request, response_id)  # its owner's to delete
    _store(request).delete(response_id)
    return DeletedResponse(id=response_id)


@router.get(
    "/v1/responses/{response_id}/input_items",
    response_model=ItemList,
    responses=documented_errors(ErrorEnvelope),
    summary="A kept response's input items (client.responses.input_items.list)",
)
async def input_items(
    response_id: str,
    request: Request,
    after: str | None = None,
    limit: int = Query(20, ge=1, le=MAX_PAGE),
    order: Literal["asc", "desc"] = "desc",
) -> ItemList:
    stored = _kept(request, response_id)
    start, end = stored.inputs
    page = item_page(stored.conversation[start:end], after=after, limit=limit, order=order)
    if page is None:
        raise InferError(
            ErrorKind.NOT_FOUND, f"no input item '{after}' in response '{response_id}'",
            param="after",
        )  # fmt: skip
    return page


def _store(request: Request) -> ResponseStore:
    store: ResponseStore = request.app.state.responses
    return store


def _kept(request: Request, response_id: str, *, continued: bool = False) -> StoredResponse:
    """A kept response that the caller may read: its owner's, or an admin's. One not kept is
    a 404; for a request that would continue it, a 400 with OpenAI's code for that, on which
    clients (Codex's proxies) send the whole conversation again."""
    stored = _store(request).find(response_id)
    if stored is None:
        message = (
            f"no response '{response_id}' is kept here (kept responses last until the host "
            "restarts or needs the room)"
        )
        if continued:
            raise InferError(
                ErrorKind.INVALID_PARAMS, message, param="previous_response_id",
                details={"openai_code": "previous_response_not_found"},
            )  # fmt: skip
        raise InferError(ErrorKind.NOT_FOUND, message, param="response_id")
    access_of(request).check_owner(request, stored.owner, f"response '{response_id}'")
    return stored


def _keeper(
    request: Request,
    body: ResponsesRequest,
    before: StoredResponse | None,
    within: Conversation | None,
) -> Callable[[ResponseObject], ResponseObject]:
    """What to do with the response once it ended: keep it with its conversation, unless the
    request said `store: false` or it failed (a failed one is not continued: a whole reply
    that fails is an error, and is not kept either); add its input and output to the
    conversation it is in, unless it failed; and hand it on."""
    owner = access_of(request).owner(request)
    conversations = conversation_store(request)

    def keep(ended: ResponseObject) -> ResponseObject:
        if ended.status == "failed":
            return ended
        inputs = [stored_item(item) for item in body.input_items()]
        if body.store is not False:
            _store(request).put(ended, before, inputs, owner)
        if within is not None and conversations.find(within.id) is within:  # not deleted
            try:
                conversations.add(within, [*inputs, *output_items(ended)])
            except InferError as err:  # the reply went out already: say so in the log
                log.warning("response %s not added to its conversation: %s", ended.id,
                            err.message)  # fmt: skip
        return ended

    return keep


def _call_item(call: ToolCallOut) -> FunctionCallItem:
    call_id = call.id or ""
    return FunctionCallItem(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=call.function.name or "",
        arguments=call.function.arguments or "",
    )


# OpenAI's codes for a response that failed; every other kind of ours is a server error
_FAILED_CODES = {
    ErrorKind.QUEUE_FULL: "rate_limit_exceeded",
    ErrorKind.CLIENT_BUSY: "rate_limit_exceeded",
    ErrorKind.RATE_LIMITED: "rate_limit_exceeded",
    ErrorKind.BUDGET_SPENT: "rate_limit_exceeded",
}


def _ended(
    started: ResponseObject, job: Job, final: Finished, output: list[OutputItem]
) -> ResponseObject:
    """The response once its job ended: its output (what went out, where it failed), status
    and usage."""
    timings = final.timings
    usage = ResponseUsage(
        input_tokens=job.tokens_in,
        output_tokens=timings.tokens_out,
        total_tokens=job.tokens_in + timings.tokens_out,
        input_tokens_details=InputTokensDetails(cached_tokens=timings.tokens_cached),
    )
    update: dict[str, Any] = {"output": output, "usage": usage}
    if (failure := final.failure) is not None:
        code = _FAILED_CODES.get(failure.kind, "server_error")
        message = f"{failure.kind.value}: {failure.message}"
        update |= {"status": "failed", "error": ResponseError(code=code, message=message)}
    elif final.finish_reason == "length":
        update |= {
            "status": "incomplete",
            "incomplete_details": IncompleteDetails(reason="max_output_tokens"),
        }
    else:
        update["status"] = "completed"
    return started.model_copy(update=update)


class _TextDelta(BaseModel):
    """The one event of the hot path, rendered from a template (streams.Template)."""

    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int = 0
    content_index: int = 0
    delta: str
    logprobs: list[Any] = []
    sequence_number: int


class _Stream:
    """The events of one streamed response, in OpenAI's order: an item opens
    (`output_item.added`), takes its deltas and closes (`.done`) before the next opens."""

    def __init__(
        self,
        job: Job,
        started: ResponseObject,
        use: ToolUse,
        keep: Callable[[ResponseObject], ResponseObject],
    ) -> None:
        self._job, self._started, self._keep = job, started, keep
        self._numbers = itertools.count()
        self._message_id = f"msg_{job.id}"
        self._delta = Template(
            _TextDelta(item_id=self._message_id, delta=HOLE, sequence_number=NUMBER_HOLE)
        )
        self._text: list[str] | None = None  # the message's text, once its item is open
        self._calls: list[FunctionCallItem] = []  # the last one is open until the end
        self._use = use

    def event(self, kind: str, **fields: Any) -> SseEvent:
        body = {"type": kind, **fields, "sequence_number": next(self._numbers)}
        return SseEvent(json.dumps(body, ensure_ascii=False, separators=(",", ":")), kind)

    def response(self, kind: str, of: ResponseObject) -> SseEvent:
        return self.event(kind, response=of.model_dump(mode="json"))

    async def events(self) -> AsyncIterator[SseEvent]:
        yield self.response("response.created", self._started)
        yield self.response("response.in_progress", self._started)
        async for piece in reply(self._job, self._use):
            if isinstance(piece, TokenText):
                out = self._text_events(piece.text)
            elif isinstance(piece, CallDelta):
                out = self._call(piece)
            else:
                out = self._finish(piece.final)
            for event in out:
                yield event

    def _text_events(self, piece: str) -> list[SseEvent]:
        out = []
        if self._text is None:
            self._text = []
            item = OutputMessage(id=self._message_id, status="in_progress")
            out += [
                self.event("response.output_item.added", output_index=0, item=item.model_dump()),
                self.event(
                    "response.content_part.added", item_id=self._message_id, output_index=0,
                    content_index=0, part=OutputText(text="").model_dump(),
                ),
            ]  # fmt: skip
        self._text.append(piece)
        out.append(
            SseEvent(self._delta.render(piece, next(self._numbers)), "response.output_text.delta")
        )
        return out

    def _call(self, call: CallDelta) -> list[SseEvent]:
        out = []
        if call.name is not None:  # a new call: the one before it closes, this one opens
            if self._calls:
                out += self._close_call(len(self._calls) - 1, "completed")
            item = FunctionCallItem(
                id=f"fc_{call.id}", call_id=call.id or "", name=call.name, arguments="",
                status="in_progress",
            )  # fmt: skip
            self._calls.append(item)
            added = self.event(
                "response.output_item.added", output_index=call.index, item=item.model_dump()
            )
            out.append(added)
        if call.arguments:
            item = self._calls[call.index]
            item.arguments += call.arguments
            delta = self.event(
                "response.function_call_arguments.delta", item_id=item.id,
                output_index=call.index, delta=call.arguments,
            )  # fmt: skip
            out.append(delta)
        return out

    def _close_call(self, index: int, status: ItemStatus) -> list[SseEvent]:
        item = self._calls[index]
        item.status = status
        return [
            self.event(
                "response.function_call_arguments.done", item_id=item.id, output_index=index,
                arguments=item.arguments,
            ),
            self.event("response.output_item.done", output_index=index, item=item.model_dump()),
        ]  # fmt: skip

    def _finish(self, final: Finished) -> list[SseEvent]:
        out = []
        # What went out stays as it was; an item a failure or max_output_tokens cut short
        # says so, and the response's last event says why.
        status: ItemStatus = (
            "completed"
            if final.failure is None and final.finish_reason != "length"
            else "incomplete"
        )
        output: list[OutputItem] = []
        if self._text is not None:
            text = "".join(self._text)
            part = OutputText(text=text)
            message = OutputMessage(id=self._message_id, status=status, content=[part])
            output.append(message)
            out += [
                self.event(
                    "response.output_text.done", item_id=self._message_id, output_index=0,
                    content_index=0, text=text, logprobs=[],
                ),
                self.event(
                    "response.content_part.done", item_id=self._message_id, output_index=0,
                    content_index=0, part=part.model_dump(),
                ),
                self.event("response.output_item.done", output_index=0, item=message.model_dump()),
            ]  # fmt: skip
        if self._calls:
            out += self._close_call(len(self._calls) - 1, status)
            output += self._calls
        ended = self._keep(_ended(self._started, self._job, final, output))
        out.append(self.response(f"response.{ended.status}", ended))  # completed, incomplete
        return out  # (max_output_tokens), or failed
