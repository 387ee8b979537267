"""HostService: the one door to the host for every face (HTTP, Hyperswarm, the dashboard).

It owns the engines (a registry of pools, private to it) and the transports, turns settings
into engines at start(), and drains and frees everything at stop(). Faces submit and cancel
through `Job` handles and read protocol models; every engine operation is written here once,
and each face only maps its typed result or error onto its wire format.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from .. import paths
from ..config import HostSettings
from ..engine import (
    BUNDLED_MODEL_ID,
    AnySpec,
    UpstreamSpec,
    bundled_model_path,
    engine_version,
)
from ..library import Library, LibraryModel, PullEvent
from ..protocol.errors import ErrorKind, InferError
from ..protocol.host_api import AddEngineRequest
from ..protocol.orchestrator import Capabilities, PoolHealth
from ..protocol.p2p import ServerInfo
from ..protocol.snapshots import (
    EngineStatus,
    LibraryEntry,
    LiveJob,
    MetricsSnapshot,
    QueueSnapshot,
    SnapshotKind,
    load_of,
)
from ..protocol.tokens import Props
from ..scheduler import Job, Pool, PreparedJob
from ..scheduler.metrics import Histogram
from . import reports
from .model_facts import entry_of, facts_of
from .policies import shares_from
from .prepare import Ask, prepare
from .pulls import PeerSource, Pulls
from .registry import EngineRegistry
from .residency import Residency
from .specs import engine_spec, model_roots, spec_from_entry, upstream_spec
from .usage import UsageLedger

log = logging.getLogger(__name__)

LONG_PROMPT_CHARS = 64 * 1024  # tokenizing this much text takes ~50 ms on one core
# Up to this much is tokenized on the event loop (under a millisecond): a thread hop costs more
# than that, and in a burst it held every job back until all the requests had been read.
SHORT_PROMPT_CHARS = 1024


class Transport(Protocol):
    """A face of the host (HTTP, Hyperswarm) that HostService starts and stops."""

    name: str

    def reserve(self) -> None: ...  # take what may be taken already (a port), before loading
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def describe(self) -> str: ...
    def status(self) -> str: ...


class HostService:
    """Engines, their pools, their snapshots and the transports that serve them."""

    def __init__(self, settings: HostSettings | None = None) -> None:
        self.settings = settings or HostSettings()
        self.shares = shares_from(self.settings.shares)
        self.version = engine_version()
        self.usage = UsageLedger(self.settings.ledger, self.shares, self.version)
        self._registry = EngineRegistry(self.settings.queue, self.shares, self.usage.job_ended)
        self._model_roots = model_roots(self.settings, [])
        self.transports: list[Transport] = []
        self.started_at = time.time()
        # Long prompts take turns on one thread: a client posting megabytes of text then costs
        # the host at most one core, and short prompts (the default executor) never queue
        # behind it.
        self._long_prompts = ThreadPoolExecutor(1, thread_name_prefix="long-prompt")
        self._stopped = False
        folders = [Path(folder).expanduser() for folder in self.settings.model_dirs]
        self.library = Library(paths.data_dir() / "models", folders)
        self._pulls = Pulls(self.library)
        self._residency = Residency(self._registry, self.library, self.settings)

    def attach(self, transport: Transport) -> None:
        """Serve through this transport too; it starts once the engines are loaded."""
        self.transports.append(transport)

    async def start(self) -> None:
        """Load the configured models and connect to the upstream servers (the bundled model
        when neither is given)."""
        self.started_at = time.time()
        entries, upstreams = self.settings.models, self.settings.upstream.urls
        specs: list[AnySpec] = [spec_from_entry(entry, self.settings) for entry in entries]
        if not entries and not upstreams:
            path = await asyncio.to_thread(bundled_model_path)
            specs = [engine_spec(BUNDLED_MODEL_ID, str(path), self.settings)]
        files = [spec.model_path for spec in specs]
        specs += [upstream_spec(entry, self.settings) for entry in upstreams]
        self._model_roots = model_roots(self.settings, files)
        try:
            for transport in self.transports:  # a port in use is said now, not after a load
                transport.reserve()
            await self.usage.open()
            for spec in specs:
                await self._registry.add(spec)
            for transport in self.transports:
                await transport.start()
        except BaseException:  # a port in use, a model that cannot load: give back the rest
            for transport in reversed(self.transports):
                try:
                    await transport.stop()
                except Exception:  # the first failure is the one to tell
                    log.debug("stopping %s after a failed start", transport.name, exc_info=True)
            await self.usage.close()
            raise
        # What start-up made (modules, the web app, the engines) lives as long as the host.
        # A full collection holds the GIL, stalling every stream, and walking that heap took
        # 34 to 79 ms (94k objects, 2-core box, bench/bench_gc.py); frozen, later ones walk
        # only what came after. Engines free their native memory explicitly (close), never
        # in a collector's pass.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        """Give running jobs a short grace (new ones are refused meanwhile) and cancel the rest,
        then stop the transports and free the engines. The transports stay up through the
        grace, so that every face, Hyperswarm included, delivers the replies that finish.
        A second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.settings.drain_on_stop_ms
        await asyncio.gather(*(pool.drain(grace) for pool in self._registry.pools()))
        await self._pulls.cancel_all()  # their partial files stay, to resume from
        await self._residency.stop()
        for transport in reversed(self.transports):
            await transport.stop()
        await self._registry.close()
        await self.usage.close()  # after the engines: the jobs they ended are recorded
        self._long_prompts.shutdown(wait=False, cancel_futures=True)
        gc.unfreeze()  # what start froze is the collector's again (an engine gone since, too)
        log.info("host stopped")

    def stop_now(self) -> None:
        """Stop now: the drains of `stop` cancel their jobs at once instead of giving them
        the grace (a second Ctrl-C or SIGTERM, as uvicorn and llama-server take it)."""
        log.info("stopping now: running jobs are cancelled")
        for pool in self._registry.pools():
            pool.end_drains_now()

    # ---- work --------------------------------------------------------------------------------

    async def submit(self, ask: Ask) -> Job:
        """Queue what a face asks, prepared for the engine it names (prepare.py); with
        `drop_oldest`, a conversation past the context loses its oldest turns until it fits."""
        asked = time.monotonic()
        pool = await self._pool_for(ask.model, ask.pool_id)  # (a library model loads here)
        loaded_in = time.monotonic() - asked
        sent = ask
        while True:
            try:
                with self._residency.using(pool, ask.keep_alive_s):
                    job = pool.submit(await self._prepared(pool, sent))
                if self.usage.keep_text:  # (no token reached it yet: they come on this loop)
                    job.kept_text = []
                break
            except InferError as err:
                overflow = ask.drop_oldest and err.kind is ErrorKind.CONTEXT_OVERFLOW
                shorter = sent.without_oldest_turn() if overflow else None
                if shorter is None:
                    raise
                sent = shorter
        if sent is not ask:
            left_out = len(ask.messages or ()) - len(sent.messages or ())
            log.info("%d oldest messages left out to fit the context", left_out)
        job.load_ms = loaded_in * 1000
        return job

    async def _prepared(self, pool: Pool, ask: Ask) -> PreparedJob:
        """`ask` prepared for the pool's engine now. A prompt beyond SHORT_PROMPT_CHARS is
        tokenized on a worker thread, so that one client's long prompt never holds up the event
        loop that serves the others (a 4 MB prompt takes seconds)."""
        while True:
            engine = pool.ready_engine()
            size = ask.size
            if engine.tokenizer is None or (size <= SHORT_PROMPT_CHARS and not ask.tools):
                return prepare(engine, ask)
            executor = self._long_prompts if size > LONG_PROMPT_CHARS else None
            loop = asyncio.get_running_loop()
            prepared = await loop.run_in_executor(executor, prepare, engine, ask)
            if pool.engine is engine:  # else reloaded meanwhile: the new model tokenizes anew
                return prepared

    def thinks(self, model: str | None) -> bool | None:
        """Whether the engine `model` names (the default one for None) can think, by its chat
        template; None for an upstream, whose server's template is not known here, and for a
        library model not loaded yet."""
        pool = self._loaded(model)
        engine = pool.engine if pool is not None else None
        if engine is None or engine.tokenizer is None:
            return None
        return engine.chat_format.thinks

    async def tokenize(self, model: str | None, text: str, *, add_special: bool) -> list[int]:
        """`text` as the tokens of the engine `model` names (the default one for None), off
        the event loop: a megabyte of text takes most of a second."""
        pool = await self._pool_for(model, None)
        with self._residency.using(pool, None):  # never unloaded under the tokenizer's thread
            return await asyncio.to_thread(pool.tokenize, text, add_special=add_special)

    def detokenize(self, model: str | None, tokens: Sequence[int]) -> str:
        return self._registry.resolve(model).detokenize(tokens)

    def queue_capacity(self, model: str | None) -> int:
        """The queue bound of the engine `model` names (the default one for None; a library
        model not loaded yet will have the host's)."""
        pool = self._loaded(model)
        return pool.queue_capacity if pool is not None else self.settings.queue

    def sampling_defaults(self, model: str | None) -> Mapping[str, float]:
        """What the engine `model` names (the default one for None) applies where a request
        leaves a sampling field unset: the GGUF's recommendation, then its spec's."""
        engine = self._registry.resolve(model).engine
        return engine.sampling_defaults if engine is not None else {}

    def props(self, model: str | None) -> Props:
        """llama-server's `/props` for the engine `model` names (the default one for None)."""
        return reports.llama_props(self._registry.resolve(model), self.version)

    async def _pool_for(self, model: str | None, pool_id: str | None) -> Pool:
        """The pool a request names: an engine by id or file name, or a library model, loaded
        now if it is not (residency.py); with `pool_id`, that pool or a typed error."""
        if pool_id is not None:
            if pool_id in self._registry.ids():
                return self._registry.get(pool_id)
            raise InferError(
                ErrorKind.INVALID_PARAMS, f"unknown pool_id '{pool_id}'", param="pool_id"
            )
        pool = self._loaded(model)
        if pool is not None and not self._residency.loading(pool.id):
            return pool
        if model is None:  # no engine at all: NO_ENGINE, said by the registry
            return self._registry.resolve(model)
        return await self._residency.load(model)

    def _loaded(self, model: str | None) -> Pool | None:
        """The engine `model` names among those loaded or loading; None for another name,
        also where none is loaded (a library model may still be); NO_ENGINE for no name."""
        try:
            return self._registry.resolve(model)
        except InferError as err:
            if err.kind is ErrorKind.MODEL_NOT_FOUND or (model and err.kind is ErrorKind.NO_ENGINE):
                return None
            raise

    async def load_model(self, model: str, keep_alive_s: float | None) -> bool:
        """What Ollama's clients send to load a model (a request with no prompt): the model
        loaded, and kept for `keep_alive_s`; 0 unloads it instead, now or once its jobs end
        (CONFLICT for a model the host keeps: Residency.keep). Whether it is unloaded."""
        if keep_alive_s == 0 and self._loaded(model) is None:  # `ollama stop`, not loaded
            await asyncio.to_thread(self.library.get, model)  # MODEL_NOT_FOUND for no such name
            return True
        pool = await self._pool_for(model, None)  # (loaded first, where it is loading)
        return await self._residency.keep(pool, keep_alive_s)

    def position(self, job: Job) -> tuple[int, int]:
        """(queue position, predicted start in ms) of a job now; (0, 0) once it runs."""
        return self._registry.get(job.pool_id).position(job)

    # ---- snapshots ---------------------------------------------------------------------------

    @property
    def uptime_s(self) -> float:
        return time.time() - self.started_at

    @property
    def stopping(self) -> bool:
        """The host is draining to stop: it takes no new work, whatever its engines say."""
        return self._stopped

    def engine_ids(self) -> list[str]:
        return self._registry.ids()

    def engines(self) -> list[EngineStatus]:
        return [self._status(pool) for pool in self._registry.pools()]

    def engine_status(self, engine_id: str) -> EngineStatus:
        return self._status(self._registry.get(engine_id))

    def engine_named(self, model: str) -> str | None:
        """The id of the loaded engine that `model` names as a request would (an id, a file's
        name, Ollama's forms such as `name:latest`); None for another name."""
        pool = self._loaded(model)
        return pool.id if pool is not None else None

    def _status(self, pool: Pool) -> EngineStatus:
        status = reports.engine_status(pool)
        if not self._residency.on_demand(pool.id):
            return status
        expires = self._residency.expires_at(pool)
        return status.model_copy(update={"on_demand": True, "expires_at": expires})

    async def models(self) -> list[tuple[str, str]]:
        """What a request's `model` may name, as (id, served by): every engine's id, an
        upstream server's own model ids, served by the engine in front of them, and the
        library's models not loaded ("library": a request loads them)."""
        ids = self._registry.ids()
        out = [(engine_id, "infertui") for engine_id in ids]
        for pool in self._registry.pools():
            if pool.spec.kind == UpstreamSpec.kind:
                out += [(name, pool.id) for name in pool.model_names if name not in ids]
        named = {name for name, _ in out}
        library = await asyncio.to_thread(self.servable_library)  # disk: off the event loop
        return out + [(m.name, "library") for m in library if m.name not in named]

    def servable_library(self) -> list[LibraryModel]:
        """The library's models whose files read as GGUF (`infertui list` shows the others
        too, for their owner to see): what a request may name (any thread: it reads disk)."""
        return [model for model in self.library.models() if facts_of(model).readable]

    def pool_health(self, pool_id: str) -> PoolHealth:
        return reports.pool_health(self._registry.get(pool_id))

    def pool_metrics(self, pool_id: str) -> MetricsSnapshot:
        return self._registry.get(pool_id).metrics_snapshot()

    def capabilities(self) -> Capabilities:
        return Capabilities(
            pools=[reports.pool_capabilities(p, self.version) for p in self._registry.pools()]
        )

    def live_jobs(self) -> list[LiveJob]:
        """Every job in flight on every engine, with its latest text."""
        return [job for pool in self._registry.pools() for job in reports.live_jobs(pool)]

    def histograms(self) -> list[tuple[str, dict[str, Histogram]]]:
        """(pool id, its histograms by name) for every pool."""
        return [(p.id, p.metrics.histograms()) for p in self._registry.pools()]

    def queues(self) -> list[QueueSnapshot]:
        """Each engine's queue; one that loads for requests says how many and until when."""
        out = []
        for pool in self._registry.pools():
            queue, loading = pool.queue(), self._residency.loading(pool.id)
            if loading is not None:
                waiting, left_ms = loading
                queue = queue.model_copy(update={"loading_for": waiting, "loaded_in_ms": left_ms})
            out.append(queue)
        return out

    def metrics(self) -> list[MetricsSnapshot]:
        return [pool.metrics_snapshot() for pool in self._registry.pools()]

    def addresses(self) -> dict[str, str]:
        """Where each transport serves: {"http": "http://…", "p2p": "<server ID>"}."""
        return {t.name: t.describe() for t in self.transports}

    def transport_status(self) -> dict[str, str]:
        """How each transport is doing: {"http": "listening", "p2p": "announced · 12 DHT nodes"}."""
        return {t.name: t.status() for t in self.transports}

    def server_info(self, capabilities: dict[str, Any], server_id: str | None = None) -> ServerInfo:
        """Who this host is, the same on every face; each adds its own capabilities. Its load
        goes with it, so that a client of a topic's hosts picks the one with room."""
        engines = self.engine_ids()
        capabilities = {**capabilities, "load": load_of(self.metrics())}
        return ServerInfo(
            host_name=self.settings.host_name or socket.gethostname(),
            model=engines[0] if engines else "",
            status="ready" if engines else "loading",
            server_id=server_id,
            models=engines,
            capabilities=capabilities,
        )

    # ---- the model library -------------------------------------------------------------

    async def library_entries(self) -> list[LibraryEntry]:
        """The library's models, loaded or not (headers read off the event loop)."""
        return await asyncio.to_thread(self._library_entries)

    def _library_entries(self) -> list[LibraryEntry]:
        loaded = set(self._registry.ids())
        return [entry_of(model, model.name in loaded) for model in self.library.models()]

    def pull_from_peers(self, peers: PeerSource) -> None:
        """Let `peer:<server-id>/<name>` pulls reach other hosts through `peers`."""
        self._pulls.peers = peers

    def pull_model(self, name: str, *, insecure: bool = False) -> AsyncIterator[PullEvent]:
        """Pull `name` into the library (a pull already running for it is followed): its
        progress as Ollama's /api/pull lines, to `success`; a failure raises InferError."""
        return self._pulls.follow(name, insecure=insecure)

    async def delete_model(self, name: str) -> LibraryModel:
        removed = await asyncio.to_thread(self.library.remove, name)
        log.info("deleted %s from the library", removed.name)  # (a shared box's trail)
        return removed

    async def copy_model(self, source: str, destination: str) -> LibraryModel:
        copied = await asyncio.to_thread(self.library.copy, source, destination)
        log.info("copied %s to %s in the library", source, copied.name)
        return copied

    # ---- engine operations (every face calls these) -------------------------------------------

    async def add_engine(self, request: AddEngineRequest) -> EngineStatus:
        """Load a GGUF as a new engine, or connect to an upstream server as one."""
        if request.is_upstream:
            up = upstream_spec(f"{request.engine_id}={request.model_path}", self.settings)
            up = replace(
                up,
                model=request.upstream_model or up.model,
                api_key=request.api_key or up.api_key,
                concurrency=request.concurrency or up.concurrency,
            )
            return reports.engine_status(await self._registry.add(up))
        spec = engine_spec(
            request.engine_id, self._confined(request.model_path), self.settings,
            n_ctx=request.n_ctx,
            n_gpu_layers=request.n_gpu_layers, main_gpu_id=request.main_gpu_id,
        )  # fmt: skip
        pool = await self._registry.add(spec)
        return reports.engine_status(pool)

    async def remove_engine(self, engine_id: str) -> None:
        """Cancel the engine's jobs and unload it."""
        await self._registry.remove(engine_id)
        self._residency.forget(engine_id)

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> EngineStatus:
        """Load the new model beside the old and switch atomically, or keep the old one and
        raise (OC-CTRL-2003)."""
        pool = self._registry.get(engine_id)
        await pool.reload(self._confined(model_path) if model_path else None)
        return reports.engine_status(pool)

    async def drain_engine(self, engine_id: str, deadline_ms: int) -> int:
        """Stop admitting, let jobs finish until the deadline, cancel the rest; returns how
        many were cancelled."""
        result = await self._registry.get(engine_id).drain(deadline_ms)
        return result["cancelled"]

    def _confined(self, model_path: str) -> str:
        """The path, resolved, if it lies in a folder this host loads models from; else
        FORBIDDEN, saying nothing of the file (whether it exists, what it holds)."""
        if "\x00" in model_path:
            raise InferError(
                ErrorKind.INVALID_PARAMS, "model_path holds a NUL character", param="model_path"
            )
        try:
            path = Path(model_path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):  # too long, a loop of links, unencodable
            path = None
        if path is None or not any(path.is_relative_to(root) for root in self._model_roots):
            raise InferError(
                ErrorKind.FORBIDDEN,
                "model_path is outside the folders this host loads models from "
                "(host.model_dirs in its config)",
                param="model_path",
            )
        return str(path)

    def resume_engine(self, engine_id: str) -> EngineStatus:
        """Admit again after a drain."""
        pool = self._registry.get(engine_id)
        pool.resume()
        return reports.engine_status(pool)

    def snapshot(self, kind: SnapshotKind) -> dict[str, Any]:
        """One snapshot as JSON, the same on every transport."""
        if kind is SnapshotKind.ENGINES:
            return {"engines": [s.model_dump(mode="json") for s in self.engines()]}
        rows = self.metrics() if kind is SnapshotKind.METRICS else self.queues()
        return {"pools": [row.model_dump(mode="json") for row in rows]}
