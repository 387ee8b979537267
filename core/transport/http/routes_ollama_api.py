"""Ollama's own API: /api/chat, /api/generate, /api/embed(dings), /api/tags, /api/show,
/api/ps, /api/version.

Mounted under /api so that it never meets spec 001's /chat/*. Generation goes through the same
submit (queue, admission, cancel on disconnect) as every other face.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from ...host import Ask
from ...host.model_facts import ModelFacts, facts_of, file_facts
from ...host.reply import End, reply
from ...library import LibraryModel
from ...protocol.common import ChatMessage
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Finished, TokenText
from ...protocol.finish import said_finish
from ...protocol.ollama_api import (
    OLLAMA_API_VERSION,
    ApiChatRequest,
    ApiEmbeddingsRequest,
    ApiEmbedRequest,
    ApiError,
    ApiGenerateRequest,
    CopyRequest,
    DeleteRequest,
    ModelDetails,
    ModelEntry,
    PullRequest,
    RunningModel,
    ShowRequest,
    final_stats,
    now_rfc3339,
    tagged,
)
from ...protocol.snapshots import EngineState, EngineStatus
from ...protocol.tool_stream import may_be_a_call, parse_calls
from ...scheduler import Job
from .access import ADMIN_ONLY, admin_refusals
from .deps import collect, embed_texts, service_of, submit
from .dialects import documented_errors
from .routing import StrictJSONRoute
from .streams import LiveResponse, ndjson_response

router = APIRouter(
    prefix="/api", tags=["Ollama API"], route_class=StrictJSONRoute,
    responses=documented_errors(ApiError),
)  # fmt: skip

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
NEVER = "2318-01-01T00:00:00Z"  # Ollama's expires_at of a model that stays loaded


@router.post("/chat", summary="Ollama's chat: NDJSON unless `stream: false`; `tools` too")
async def chat(body: ApiChatRequest, request: Request) -> Any:
    _check_thinking(request, body.model, body.think)
    if not body.messages:  # how Ollama's clients load (or, keep_alive 0, unload) a model
        empty = {"role": "assistant", "content": ""}
        return await _loaded_answer(request, body.model, body.keep_alive, "message", empty)
    # as Ollama does, a conversation past the context loses its oldest turns
    ask = Ask(
        model=body.model,
        messages=body.turns(),
        params=body.sampling(),
        tools=body.tools or (),
        drop_oldest=True,
        keep_alive_s=body.keep_alive,
    )
    job = await submit(request, ask)
    names = {t.function.name for t in body.tools or []}
    return await answer(request, job, "message", stream=body.stream, tool_names=names)


@router.post("/generate", summary="Ollama's completion of a prompt (chat template unless raw)")
async def generate(body: ApiGenerateRequest, request: Request) -> Any:
    _check_thinking(request, body.model, body.think)
    if not body.prompt and not body.system:  # how Ollama's clients load or unload a model
        return await _loaded_answer(request, body.model, body.keep_alive, "response", "")
    stay = body.keep_alive
    if body.raw:
        ask = Ask(model=body.model, prompt=body.prompt, params=body.sampling(), keep_alive_s=stay)
    else:
        system = [ChatMessage(role="system", content=body.system)] if body.system else []
        turns = [*system, ChatMessage(role="user", content=body.prompt)]
        ask = Ask(model=body.model, messages=turns, params=body.sampling(), keep_alive_s=stay)
    job = await submit(request, ask)
    return await answer(request, job, "response", stream=body.stream)


def _check_thinking(request: Request, model: str, think: bool | str | None) -> None:
    """`think` asked of a model whose template cannot think is refused, as Ollama refuses it,
    rather than ignored: the client would wait for reasoning that never comes."""
    if think and service_of(request).thinks(model) is False:
        raise InferError(
            ErrorKind.INVALID_PARAMS, f"{json.dumps(model)} does not support thinking",
            param="think",
        )  # fmt: skip


async def _loaded_answer(
    request: Request, model: str, keep_alive: float | None, field: str, empty: object
) -> dict[str, Any]:
    """Ollama's answer to a request with nothing to complete: the model loaded (a library
    model not loaded yet is loaded now), or with `keep_alive: 0` unloaded (`ollama stop`)."""
    unloaded = await service_of(request).load_model(model, keep_alive)
    return {"model": model, "created_at": now_rfc3339(), field: empty, "done": True,
            "done_reason": "unload" if unloaded else "load"}  # fmt: skip


async def answer(
    request: Request, job: Job, field: str, *, stream: bool, tool_names: set[str] | None = None
) -> dict[str, Any] | LiveResponse:
    """The job as Ollama answers: `field` is "message" (chat) or "response" (generate). With
    tools offered, a reply that is a call comes as `tool_calls` (streamed: once it is whole)."""
    head = {"model": job.pool_id, "created_at": now_rfc3339()}
    if stream:
        return ndjson_response(lines(job, head, field, tool_names or set()), NDJSON)
    [(text, final)] = await collect(request, job)
    return finished(head, field, text, final, tool_names or set(), job.load_ms)


def finished(
    head: dict[str, Any],
    field: str,
    text: str,
    final: Finished,
    tool_names: set[str],
    load_ms: float,
) -> dict[str, Any]:
    """The last object of a reply: done, why, and the figures."""
    reason = said_finish(final.finish_reason)
    figures = final_stats(final.timings, load_ms)
    piece = _piece(field, text, tool_names)
    return {**head, field: piece, "done": True, "done_reason": reason, **figures}


def _piece(field: str, text: str, tool_names: set[str] | None = None) -> Any:
    if field != "message":
        return text
    calls = parse_calls(text, tool_names) if tool_names else []
    if not calls:
        return {"role": "assistant", "content": text}
    made = [{"function": {"name": c.name, "arguments": json.loads(c.arguments)}} for c in calls]
    return {"role": "assistant", "content": "", "tool_calls": made}


async def lines(
    job: Job, head: dict[str, Any], field: str, tool_names: set[str]
) -> AsyncIterator[str]:
    """One JSON line per token, each with its own time (`created_at`, as Ollama's), then the
    figures; an error ends the stream as Ollama's do. A reply that may be a tool call is held
    back until it is whole."""
    model = json.dumps(head["model"])
    after = f'", "{field}": '
    chat = field == "message"
    open_piece, close_piece = ('{"role": "assistant", "content": ', "}") if chat else ("", "")
    held: list[str] | None = [] if tool_names else None
    async for piece in reply(job):  # calls come whole at the end, as Ollama sends them
        if isinstance(piece, TokenText):
            if held is not None:
                held.append(piece.text)
                if may_be_a_call("".join(held)):
                    continue
                event_text, held = "".join(held), None
            else:
                event_text = piece.text
            text = json.dumps(event_text, ensure_ascii=False)
            yield (
                f'{{"model": {model}, "created_at": "{now_rfc3339()}{after}{open_piece}{text}'
                f'{close_piece}, "done": false}}'
            )
        elif isinstance(piece, End):
            if piece.final.failure is not None:
                yield json.dumps({"error": piece.final.failure.message})
                return
            head = {**head, "created_at": now_rfc3339()}
            held_text = "".join(held or [])
            yield json.dumps(finished(head, field, held_text, piece.final, tool_names, job.load_ms))


@router.post("/embed", summary="Embeddings of one text or several, from any loaded engine")
async def embed(body: ApiEmbedRequest, request: Request) -> dict[str, Any]:
    vectors, jobs = await embed_texts(request, body.model, body.texts, body.keep_alive)
    longest_ms = max((job.result.timings.total_ms if job.result else 0.0) for job in jobs)
    return {
        "model": jobs[0].pool_id,
        "embeddings": vectors,
        "total_duration": int(longest_ms * 1_000_000),
        "load_duration": 0,
        "prompt_eval_count": sum(job.tokens_in for job in jobs),
    }


@router.post("/embeddings", summary="One embedding, as Ollama's older endpoint gives it")
async def embeddings(body: ApiEmbeddingsRequest, request: Request) -> dict[str, Any]:
    vectors, _ = await embed_texts(request, body.model, [body.prompt], body.keep_alive)
    return {"embedding": vectors[0]}


@router.get("/tags", summary="The library's models and the engines, as Ollama lists models")
async def tags(request: Request) -> dict[str, list[ModelEntry]]:
    return {"models": list((await _entries(request)).values())}


async def _entries(request: Request) -> dict[str, ModelEntry]:
    """Every model a request may name, by name: the library's (loaded or not), then the
    engines that are not the library's (files the host started with, upstreams)."""
    service = service_of(request)
    library = await asyncio.to_thread(lambda: _library_entries(service.servable_library()))
    engines = {s.engine_id: _entry(s) for s in _loaded(request)}
    listed = {entry.name for entry in library.values()}  # (tagged: engine `m`, library `m:latest`)
    return {**library, **{name: e for name, e in engines.items() if e.name not in listed}}


def _library_entries(models: list[LibraryModel]) -> dict[str, ModelEntry]:
    """The servable library's entries (HostService.servable_library: GGUFs that read), each
    described from its header (read once: file_facts keeps it by the file's mtime)."""
    return {model.name: _library_entry(model, facts_of(model)) for model in models}


@router.get("/ps", summary="The models in memory, and until when each stays")
async def ps(request: Request) -> dict[str, list[RunningModel]]:
    known = await _entries(request)
    running = []
    for status in _loaded(request):
        entry = known.get(status.engine_id) or _entry(status)
        memory = status.memory_usage
        size = int(((memory.model_size_mb + memory.context_size_mb) if memory else 0) * 2**20)
        expires = status.expires_at
        running.append(
            RunningModel(
                name=entry.name,
                model=entry.model,
                size=size or entry.size,
                digest=entry.digest,
                details=entry.details,
                expires_at=NEVER if expires is None else _rfc3339(expires),
                size_vram=size if status.gpu_offload else 0,
                context_length=status.parameters.n_ctx,
            )
        )
    return {"models": running}


@router.post("/show", summary="A model's details, as Ollama shows them")
async def show(body: ShowRequest, request: Request) -> dict[str, Any]:
    service = service_of(request)
    if not body.engine_id:  # (not a 404 for the model '')
        raise InferError(ErrorKind.INVALID_PARAMS, "model is required", param="model")
    engine_id = service.engine_named(body.engine_id)
    if engine_id is None:
        model = await asyncio.to_thread(service.library.find, body.engine_id)
        if model is None:  # (Ollama's words)
            raise InferError(
                ErrorKind.MODEL_NOT_FOUND, f"model '{body.engine_id}' not found", param="model"
            )
        return await asyncio.to_thread(_library_show, model)
    status = service.engine_status(engine_id)
    entry = _entry(status)
    file = os.path.basename(status.model_path)
    # the GGUF's own facts, as Ollama shows them (an upstream's URL has none: what it served)
    facts = await asyncio.to_thread(file_facts, Path(status.model_path))
    params = {"num_ctx": status.parameters.n_ctx, **service.sampling_defaults(status.engine_id)}
    info = (
        {"general.parameter_count": facts.parameters, **facts.metadata} if facts.readable
        else {
            "general.architecture": entry.details.family,
            "general.file_type": entry.details.quantization_level,
            f"{entry.details.family}.context_length": status.parameters.n_ctx,
        }
    )  # fmt: skip
    return {
        "license": facts.license,
        "modelfile": f"# served by infertui as engine {status.engine_id}\nFROM {file}\n",
        "parameters": "\n".join(f"{key} {value}" for key, value in params.items()),
        "template": service.props(status.engine_id).chat_template or facts.template or "",
        "details": entry.details,
        "model_info": info,
        # Ollama's clients offer tools only where "tools" is listed; every engine here takes
        # them (/api/chat's `tools`). Embeddings come from local engines, not upstream ones.
        "capabilities": ["completion", "tools"]
        + ([] if status.model_path.startswith(("http://", "https://")) else ["embedding"])
        + (["thinking"] if service_of(request).thinks(status.engine_id) else []),
        "modified_at": entry.modified_at,
    }


def _library_refusals(reasons: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """An admin-only library route's refusals: the admin key's, and `reasons` by status."""
    said: dict[int | str, dict[str, Any]] = {
        code: {"model": ApiError, "description": text} for code, text in reasons.items()
    }
    return {**admin_refusals(ApiError), **said}


def _pull_line(event: dict[str, Any]) -> str:
    """A pull's event as Ollama's line: the fields it has (no byte counts before a file)."""
    return json.dumps({key: value for key, value in event.items() if value is not None})


@router.post(
    "/pull", dependencies=ADMIN_ONLY,
    responses=_library_refusals({
        502: "the source sent a file whose sha256 is not the published one, or cannot be reached",
        507: "not enough free disk for the model",
    }),
    summary="Fetch a model into the library: NDJSON progress unless `stream: false`",
)  # fmt: skip
async def pull(body: PullRequest, request: Request) -> Any:
    progress = service_of(request).pull_model(body.wanted, insecure=body.insecure)
    if not body.stream:
        async for _ in progress:
            pass
        return {"status": "success"}
    # A bad name is an error status; a model the source lacks, an error line after the 200's
    # first line (as Ollama's: it is known only once the manifest is asked for)
    first = await anext(progress)

    async def lines() -> AsyncIterator[str]:
        yield _pull_line(first)
        try:
            async for event in progress:
                yield _pull_line(event)
        except InferError as err:  # after the 200: Ollama's way, an error line ends the stream
            yield json.dumps({"error": err.message, "kind": err.kind.value})

    return ndjson_response(lines(), NDJSON)


@router.delete(
    "/delete", dependencies=ADMIN_ONLY,
    responses=_library_refusals({
        403: "a configured model folder's GGUF, not the library's to remove",
        404: "no such model in the library",
    }),
    summary="Remove a model from the library",
)  # fmt: skip
async def delete(body: DeleteRequest, request: Request) -> dict[str, Any]:
    await service_of(request).delete_model(body.wanted)
    return {}


@router.post(
    "/copy", dependencies=ADMIN_ONLY,
    responses=_library_refusals({
        404: "no such model in the library", 409: "the destination's name is taken"
    }),
    summary="File a library model under another name too",
)  # fmt: skip
async def copy(body: CopyRequest, request: Request) -> dict[str, Any]:
    await service_of(request).copy_model(body.source, body.destination)
    return {}


@router.get("/version", summary="The Ollama release whose API this one answers as")
async def api_version() -> dict[str, str]:
    return {"version": OLLAMA_API_VERSION}  # infertui's own: `infertui --version`


def _library_show(model: LibraryModel) -> dict[str, Any]:
    """/api/show of a library model, loaded or not, from its GGUF's header."""
    facts = facts_of(model)
    params = "\n".join(f"{key} {value}" for key, value in facts.sampling.items())
    return {
        "license": facts.license,
        "modelfile": f"# {model.name} in infertui's library\nFROM {model.path}\n",
        "parameters": params,
        "template": facts.template or "",
        "system": str(model.layers.get("system") or ""),
        "details": _details(facts),
        "model_info": {"general.parameter_count": facts.parameters, **facts.metadata},
        "capabilities": ["completion", "tools", "embedding"]
        + (["thinking"] if facts.thinks else []),
        "modified_at": _rfc3339(model.modified),
    }


def _library_entry(model: LibraryModel, facts: ModelFacts) -> ModelEntry:
    return ModelEntry(
        name=tagged(model.name), model=tagged(model.name), modified_at=_rfc3339(model.modified),
        size=model.size, digest=model.sha256 or _file_digest(model.path.name, model.size,
                                                             model.modified),
        details=_details(facts),
    )  # fmt: skip


def _details(facts: ModelFacts) -> ModelDetails:
    family = facts.architecture
    return ModelDetails(family=family, families=[family], parameter_size=facts.parameter_size,
                        quantization_level=facts.quantization)  # fmt: skip


def _rfc3339(when: float) -> str:
    try:
        return dt.datetime.fromtimestamp(when, dt.UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):  # past year 9999: as good as never
        return NEVER


def _loaded(request: Request) -> list[EngineStatus]:
    return [s for s in service_of(request).engines() if s.status is EngineState.LOADED]


def _entry(status: EngineStatus) -> ModelEntry:
    try:
        stat = os.stat(status.model_path)
        size, mtime = stat.st_size, stat.st_mtime
    except OSError:
        size, mtime = 0, 0.0
    digest = _file_digest(os.path.basename(status.model_path), size, mtime)
    return ModelEntry(
        name=tagged(status.engine_id), model=tagged(status.engine_id),
        modified_at=_rfc3339(mtime), size=size,
        digest=digest, details=ModelDetails.of(status.model_description),
    )  # fmt: skip


def _file_digest(file: str, size: int, mtime: float) -> str:
    """A digest that names a file whose sha256 is not known (its name, size and time)."""
    return hashlib.sha256(f"{file}:{size}:{mtime}".encode()).hexdigest()
