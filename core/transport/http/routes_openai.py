"""Spec 004, OpenAI-compatible: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from ...host import Ask
from ...host.reply import End, replies
from ...protocol.common import SamplingParams
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import TokenText
from ...protocol.finish import openai_finish
from ...protocol.openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from ...protocol.openai_replies import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatLogprobs,
    ChunkChoice,
    CompletionChoice,
    CompletionLogprobs,
    Delta,
    EmbeddingData,
    EmbeddingList,
    EmbeddingUsage,
    ErrorEnvelope,
    FunctionCall,
    ModelCard,
    ModelList,
    PromptTokensDetails,
    TextCompletion,
    ToolCallOut,
    Usage,
    error_envelope,
)
from ...protocol.tool_stream import CallDelta
from ...protocol.tool_use import ToolUse
from ...scheduler import Job
from .deps import collect, embed_texts, reply_limit, service_of, submit_all
from .dialects import documented_errors
from .routing import StrictJSONRoute
from .streams import HOLE, LiveResponse, Template, json_line, sse_response

router = APIRouter(tags=["OpenAI-compatible (spec 004)"], route_class=StrictJSONRoute)

FINGERPRINT = "fp_infertui"
DONE = "[DONE]"
_ERRORS = documented_errors(ErrorEnvelope)
_SSE = {
    "content": {"text/event-stream": {"example": 'data: {"choices":[...]}\n\ndata: [DONE]\n\n'}}
}


UsageOf = Callable[[], Usage]  # a stream's usage, read when it ends


def n_choices(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The sampling of `n` choices: each its own seed when one is set. Their prompt is read
    once: the engine copies its KV cells to the others."""
    return [params] + [
        params.model_copy(
            update={"seed": (params.seed + i) % (2**32 - 1) if params.seed is not None else None}
        )
        for i in range(1, n)
    ]


def usage_of(jobs: list[Job], n: int) -> Usage:
    """What the jobs of a request of `n` choices per prompt used. Each prompt counts once, as
    OpenAI counts it, and so do the tokens it found cached: its other choices copy its cells."""
    prompts = jobs[::n]
    tokens_in = sum(job.tokens_in for job in prompts)
    tokens_out = sum(job.result.timings.tokens_out if job.result else 0 for job in jobs)
    cached = sum(job.result.timings.tokens_cached if job.result else 0 for job in prompts)
    return Usage(
        prompt_tokens=tokens_in,
        completion_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses={200: _SSE, **_ERRORS},
    summary="Chat completion; `stream: true` for SSE chunks ending with [DONE]",
)
async def chat_completions(
    body: ChatCompletionRequest, request: Request
) -> ChatCompletion | LiveResponse:
    asked, use = chat_job(body, reply_limit(request, body.token_budget))
    variants = n_choices(asked.params, body.n)
    jobs = await submit_all(request, [replace(asked, params=p) for p in variants], "n")
    model, created = jobs[0].pool_id, int(time.time())
    if body.stream:
        usage = (lambda: usage_of(jobs, body.n)) if body.include_usage else None
        return sse_response(chat_chunks(jobs, model, created, usage, use))
    results = await collect(request, *jobs)
    choices = []
    for i, ((text, final), job) in enumerate(zip(results, jobs, strict=True)):
        cut = final.finish_reason == "length"
        calls = use.final_calls(text, cut)
        choices.append(
            ChatChoice(
                index=i,
                message=AssistantMessage(content=None if calls else text, tool_calls=calls or None),
                finish_reason=openai_finish(final.finish_reason, called=bool(calls)),
                logprobs=ChatLogprobs.of(job.logprobs) if body.logprobs else None,
            )
        )
    return ChatCompletion(
        id=f"chatcmpl-{jobs[0].id}",
        created=created,
        model=model,
        system_fingerprint=FINGERPRINT,
        choices=choices,
        usage=usage_of(jobs, body.n),
    )


def chat_job(body: ChatCompletionRequest, max_tokens: int | None) -> tuple[Ask, ToolUse]:
    """The job a chat request asks for, and the tools its reply may call."""
    offered = body.offered
    ask = Ask(
        model=body.model,
        messages=body.messages,
        params=body.sampling(max_tokens),
        tools=offered,
        forced=body.forced_calls,
        priority=body.asked_priority,
    )
    return ask, ToolUse({t.function.name for t in offered}, body.forced)


async def chat_chunks(
    jobs: list[Job], model: str, created: int, usage: UsageOf | None, tools: ToolUse
) -> AsyncIterator[str]:
    def chunk(index: int, delta: Delta, finish: Any = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=f"chatcmpl-{jobs[0].id}",
            created=created,
            model=model,
            system_fingerprint=FINGERPRINT,
            choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish)],
        )

    tokens = [Template(chunk(i, Delta(content=HOLE))) for i in range(len(jobs))]
    for i in range(len(jobs)):
        yield json_line(chunk(i, Delta(role="assistant", content="")))

    def text_chunk(index: int, piece: TokenText) -> str:
        if not piece.logprobs:  # the hot path: one token's text
            return tokens[index].render(piece.text)
        with_logprobs = chunk(index, Delta(content=piece.text))  # rare enough to build it whole
        with_logprobs.choices[0].logprobs = ChatLogprobs.of(piece.logprobs)
        return json_line(with_logprobs)

    def call_chunk(index: int, delta: CallDelta) -> str:
        function = FunctionCall(name=delta.name, arguments=delta.arguments)
        kind = "function" if delta.id else None
        out = ToolCallOut(index=delta.index, id=delta.id, type=kind, function=function)
        return json_line(chunk(index, Delta(tool_calls=[out])))

    async for index, piece in replies(jobs, tools):
        if isinstance(piece, TokenText):
            yield text_chunk(index, piece)
        elif isinstance(piece, CallDelta):
            yield call_chunk(index, piece)
        else:
            if piece.final.failure is not None:
                yield error_envelope(piece.final.failure).model_dump_json()
                break
            finish = openai_finish(piece.final.finish_reason, called=piece.called)
            yield json_line(chunk(index, Delta(content=""), finish))
    else:
        if usage is not None:
            final = chunk(0, Delta()).model_copy(update={"choices": [], "usage": usage()})
            yield final.model_dump_json()
    yield DONE


@router.post(
    "/v1/completions",
    response_model=TextCompletion,
    responses={200: _SSE, **_ERRORS},
    summary="Text completion of a string or an array of prompts (one choice each)",
)
async def completions(body: CompletionRequest, request: Request) -> TextCompletion | LiveResponse:
    variants = n_choices(body.sampling(reply_limit(request, body.max_tokens)), body.n)
    jobs = await submit_all(  # choice i * n + j is choice j of prompt i, as OpenAI numbers them
        request,
        [
            Ask(model=body.model, prompt=prompt, params=p, priority=body.asked_priority)
            for prompt in body.prompts
            for p in variants
        ],
    )
    model, created = jobs[0].pool_id if jobs else body.model, int(time.time())
    cid = f"cmpl-{jobs[0].id}" if jobs else f"cmpl-{created}"
    if body.stream:
        usage = (lambda: usage_of(jobs, body.n)) if body.include_usage else None
        return sse_response(completion_chunks(jobs, cid, model, created, usage))
    results = await collect(request, *jobs)
    return TextCompletion(
        id=cid,
        created=created,
        model=model,
        choices=[
            CompletionChoice(
                index=i,
                text=text,
                finish_reason=openai_finish(final.finish_reason),
                logprobs=CompletionLogprobs.of(job.logprobs) if body.logprobs is not None else None,
            )
            for i, ((text, final), job) in enumerate(zip(results, jobs, strict=True))
        ],
        usage=usage_of(jobs, body.n),
    )


async def completion_chunks(
    jobs: list[Job], cid: str, model: str, created: int, usage: UsageOf | None = None
) -> AsyncIterator[str]:
    def chunk(index: int, text: str, finish: Any) -> TextCompletion:
        choice = CompletionChoice(index=index, text=text, finish_reason=finish)
        return TextCompletion(id=cid, created=created, model=model, choices=[choice])

    tokens = [Template(chunk(i, HOLE, "")) for i in range(len(jobs))]
    offsets = [0] * len(jobs)
    for i in range(len(jobs)):
        yield json_line(chunk(i, "", ""))
    async for index, piece in replies(jobs):
        if isinstance(piece, TokenText):
            if piece.logprobs:
                with_logprobs = chunk(index, piece.text, "")
                logprobs = CompletionLogprobs.of(piece.logprobs, offsets[index])
                with_logprobs.choices[0].logprobs = logprobs
                yield json_line(with_logprobs)
            else:
                yield tokens[index].render(piece.text)
            offsets[index] += len(piece.text)
        elif isinstance(piece, End):
            if piece.final.failure is not None:
                yield error_envelope(piece.final.failure).model_dump_json()
                break
            yield json_line(chunk(index, "", openai_finish(piece.final.finish_reason)))
    else:
        if usage is not None:
            final = TextCompletion(id=cid, created=created, model=model, choices=[])
            yield final.model_copy(update={"usage": usage()}).model_dump_json()
    yield DONE


@router.post(
    "/v1/embeddings",
    response_model=EmbeddingList,
    responses=_ERRORS,
    summary="Embeddings of one text or several, from any loaded engine (made on first use)",
)
async def embeddings(body: EmbeddingRequest, request: Request) -> EmbeddingList:
    vectors, jobs = await embed_texts(request, body.model, body.texts)
    if body.dimensions is not None and body.dimensions != len(vectors[0]):
        raise InferError(
            ErrorKind.INVALID_PARAMS,
            f"this engine's embeddings have {len(vectors[0])} dimensions, not {body.dimensions}",
            param="dimensions",
        )
    tokens = sum(job.tokens_in for job in jobs)
    return EmbeddingList(
        data=[
            EmbeddingData(index=i, embedding=_encoded(v, body.encoding_format))
            for i, v in enumerate(vectors)
        ],
        model=jobs[0].pool_id,
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


@router.get(
    "/v1/models",
    response_model=ModelList,
    response_model_exclude_none=True,
    summary="The engines, as OpenAI models",
)
async def models(request: Request) -> ModelList:
    return ModelList(data=await _model_cards(request))


@router.get(
    "/v1/models/{model_id:path}",
    response_model=ModelCard,
    response_model_exclude_none=True,
    responses={404: _ERRORS[404]},
)
async def model(model_id: str, request: Request) -> ModelCard:
    for card in await _model_cards(request):
        if card.id == model_id:
            return card
    raise InferError(ErrorKind.MODEL_NOT_FOUND, f"no model named '{model_id}'", param="model")


async def _model_cards(request: Request) -> list[ModelCard]:
    """Every name a request's `model` may use, with the context per sequence of the engine
    behind it (an engine id is served by "infertui", an upstream's model by its engine)."""
    service = service_of(request)
    created = int(service.started_at)
    n_ctx = {s.engine_id: s.parameters.n_ctx or None for s in service.engines()}  # 0: unknown
    return [
        ModelCard(
            id=name,
            created=created,
            owned_by=by,
            max_model_len=n_ctx.get(name if by == "infertui" else by),
        )
        for name, by in await service.models()
    ]
