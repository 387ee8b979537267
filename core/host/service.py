"""HostService: the host core every face (P2P, HTTP, TUI) is a view on.

It owns the engine registry (and, in later layers, the transports), turns settings into
engines at start(), and drains and frees everything at stop().
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from ..config import HostSettings
from ..engine import BUNDLED_MODEL_ID, EngineSpec, bundled_model_path, engine_version
from ..protocol.common import ChatMessage, SamplingParams
from ..protocol.openai import AddEngineRequest
from ..protocol.p2p import ServerInfo
from ..protocol.snapshots import EngineStatus, MetricsSnapshot, QueueSnapshot
from ..scheduler import Job, Pool
from .registry import EngineRegistry

log = logging.getLogger(__name__)


def spec_from_entry(entry: str, settings: HostSettings) -> EngineSpec:
    """An EngineSpec from a `--model` value: PATH, or ID=PATH."""
    engine_id, sep, path = entry.partition("=")
    if not sep:
        path, engine_id = entry, Path(entry).stem
    return engine_spec(engine_id, path, settings)


def engine_spec(
    engine_id: str,
    model_path: str,
    settings: HostSettings,
    *,
    n_ctx: int | None = None,
    n_gpu_layers: int | None = None,
    main_gpu_id: int | None = None,
) -> EngineSpec:
    e = settings.engine
    return EngineSpec(
        model_path=str(Path(model_path).expanduser()),
        engine_id=engine_id,
        n_ctx=n_ctx or e.ctx,
        n_gpu_layers=n_gpu_layers if n_gpu_layers is not None else e.gpu_layers,
        main_gpu_id=main_gpu_id if main_gpu_id is not None else e.main_gpu,
        n_threads=e.threads,
        n_parallel=e.parallel,
        n_batch=e.batch,
        extra_buffers=e.extra_buffers,
        deterministic=e.deterministic,
        backend_sampling={"auto": None, "on": True, "off": False}[e.backend_sampling],
    )


class Transport(Protocol):
    """A face of the host (HTTP, Hyperswarm) that HostService starts and stops."""

    name: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def describe(self) -> str: ...


class HostService:
    """Engines, their pools, their snapshots and the transports that serve them."""

    def __init__(self, settings: HostSettings | None = None) -> None:
        self.settings = settings or HostSettings()
        self.registry = EngineRegistry(self.settings.queue)
        self.transports: list[Transport] = []
        self.started_at = time.time()
        self.version = engine_version()

    def attach(self, transport: Transport) -> None:
        """Serve through this transport too; it starts once the engines are loaded."""
        self.transports.append(transport)

    async def start(self) -> None:
        """Load the configured models (the bundled one when none is given)."""
        self.started_at = time.time()
        entries = self.settings.models
        if entries:
            specs = [spec_from_entry(entry, self.settings) for entry in entries]
        else:
            path = await asyncio.to_thread(bundled_model_path)
            specs = [engine_spec(BUNDLED_MODEL_ID, str(path), self.settings)]
        for spec in specs:
            await self.registry.add(spec)
        for transport in self.transports:
            await transport.start()

    async def stop(self) -> None:
        """Stop the transports, give running jobs a short grace, cancel the rest, free engines."""
        for transport in reversed(self.transports):
            await transport.stop()
        grace = self.settings.drain_on_stop_ms
        await asyncio.gather(*(pool.drain(grace) for pool in self.registry.pools()))
        await self.registry.close()
        log.info("host stopped")

    # ---- work --------------------------------------------------------------------------------

    def submit(
        self,
        *,
        model: str | None,
        params: SamplingParams,
        messages: Sequence[ChatMessage] | None = None,
        prompt: str | None = None,
        client_id: str | None = None,
        client_limit: int | None = None,
        job_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Job:
        pool = self.registry.resolve(model)
        return pool.submit(
            params=params,
            messages=messages,
            prompt=prompt,
            client_id=client_id,
            client_limit=client_limit,
            job_id=job_id,
            correlation_id=correlation_id,
        )

    def pool(self, engine_id: str) -> Pool:
        return self.registry.get(engine_id)

    # ---- snapshots ---------------------------------------------------------------------------

    @property
    def uptime_s(self) -> float:
        return time.time() - self.started_at

    def engines(self) -> list[EngineStatus]:
        return self.registry.statuses()

    def queues(self) -> list[QueueSnapshot]:
        return [pool.queue() for pool in self.registry.pools()]

    def metrics(self) -> list[MetricsSnapshot]:
        return [pool.metrics_snapshot() for pool in self.registry.pools()]

    def addresses(self) -> dict[str, str]:
        """Where each transport serves: {"http": "http://…", "p2p": "<server ID>"}."""
        return {t.name: t.describe() for t in self.transports}

    def server_info(self, capabilities: dict[str, Any], server_id: str | None = None) -> ServerInfo:
        """Who this host is, the same on every face; each adds its own capabilities."""
        engines = self.registry.ids()
        return ServerInfo(
            host_name=self.settings.host_name or socket.gethostname(),
            model=engines[0] if engines else "",
            status="ready" if engines else "loading",
            server_id=server_id,
            models=engines,
            capabilities=capabilities,
        )

    async def add_engine(self, request: AddEngineRequest) -> Pool:
        """Load a GGUF as a new engine; every face adds engines through here."""
        spec = engine_spec(
            request.engine_id, request.model_path, self.settings, n_ctx=request.n_ctx,
            n_gpu_layers=request.n_gpu_layers, main_gpu_id=request.main_gpu_id,
        )  # fmt: skip
        return await self.registry.add(spec)

    def snapshot(self, kind: str) -> dict[str, Any]:
        """One snapshot as JSON, the same on every transport: "engines", "queue" or "metrics"."""
        if kind == "engines":
            return {"engines": [s.model_dump(mode="json") for s in self.engines()]}
        rows = self.metrics() if kind == "metrics" else self.queues()
        return {"pools": [row.model_dump(mode="json") for row in rows]}
