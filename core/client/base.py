"""One client API over both transports: a chat reply stream, snapshots and admin calls.

Client                      connected to one host (Hyperswarm or HTTP)
  .info -> HostInfo         who the host is and what it serves
  .chat(...) -> ChatReply   async iterator of text; .abort(); .stats when it ends
  .engines() .queue() .metrics() .watch_metrics() .hosts() .library()
  .update_info()            follow the host's engines as they change
  .add_engine() .remove_engine() .reload_engine() .drain_engine() .resume_engine()  (admin)
  .pull_model() .delete_model() .copy_model() .load_model() .unload_model()  (the library)
  .wait_closed()            returns when the connection is gone
"""

from __future__ import annotations

import asyncio
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..protocol.common import ChatMessage
from ..protocol.host_api import AddEngineRequest
from ..protocol.shares import UsageReport
from ..protocol.snapshots import (
    EngineStatus,
    FinishReason,
    LibraryEntry,
    MetricsSnapshot,
    PoolState,
    QueueSnapshot,
    load_of,
)

Transport = Literal["p2p", "http", "local"]  # local: the host's own dashboard


@dataclass(frozen=True, slots=True)
class HostInfo:
    """What a host says about itself when a client connects."""

    host_name: str
    model: str
    models: tuple[str, ...]
    status: str
    address: str  # the server ID or URL this client reached
    transport: Transport
    admin: bool  # whether this client may add, remove, reload and drain engines
    extra: dict[str, Any] = field(default_factory=dict)
    unready: tuple[str, ...] = ()  # engines not taking work now: loading, draining, failed


@dataclass(frozen=True, slots=True)
class ChatStats:
    """How a reply ended; timings measured by the host where it reports them."""

    finish_reason: FinishReason
    tokens_in: int | None
    tokens_out: int
    ttft_ms: float | None
    tokens_per_s: float
    model: str = ""  # the engine that answered, where the host says
    host: str = ""  # the host that answered, where the client chose among several (a topic)
    # the host cut the reply short (a drain's deadline, its engine removed, the host stopping),
    # with its words where it gave any; None when it ended otherwise, or this client stopped it
    host_stopped: str | None = None


@dataclass(frozen=True, slots=True)
class HostLoad:
    """A host this client reaches, and how busy it is."""

    host_name: str
    address: str
    models: tuple[str, ...]
    slots: int
    free_slots: int
    queue_depth: int


class ChatReply(ABC):
    """One streamed reply: iterate for text pieces; `stats` is set once it has ended."""

    request_id: str = ""
    stats: ChatStats | None = None

    @abstractmethod
    def __aiter__(self) -> AsyncIterator[str]: ...

    @abstractmethod
    def abort(self) -> None:
        """Ask the host to stop generating; the stream then ends with finish_reason "abort"."""

    async def text(self) -> str:
        return "".join([part async for part in self])


class Client(ABC):
    """A connection to one host."""

    info: HostInfo
    # how the host's queue snapshots name this client's jobs (before any "/<connection>"),
    # where the client can know it
    queue_client_id: str | None = None

    async def update_info(self) -> bool:
        """Follow the host's engines as they are added, removed, and come and go from ready:
        `info.models`, `info.unready`, and as `info.model` the engine that answers a request
        naming none. True if any changed."""
        engines = await self.engines()
        ids = tuple(e.engine_id for e in engines)
        ready = [e.engine_id for e in engines if e.pool_state is PoolState.READY]
        unready = tuple(i for i in ids if i not in ready)
        default = (ready or [*ids, ""])[0]
        changed = (ids, default, unready) != (self.info.models, self.info.model, self.info.unready)
        self.info = dataclasses.replace(self.info, models=ids, model=default, unready=unready)
        return changed

    async def library(self) -> list[LibraryEntry]:
        """The host's library, loaded or not: a chat naming one loads it. None here: a
        topic's hosts each have their own."""
        return []

    @abstractmethod
    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply: ...

    async def hosts(self) -> list[HostLoad]:
        """The hosts this client reaches (one; a topic's client has several), with their load."""
        load = load_of(await self.metrics())
        return [HostLoad(self.info.host_name, self.info.address, self.info.models, **load)]

    @abstractmethod
    async def engines(self) -> list[EngineStatus]: ...

    @abstractmethod
    async def queue(self) -> list[QueueSnapshot]: ...

    @abstractmethod
    async def metrics(self) -> list[MetricsSnapshot]: ...

    @abstractmethod
    async def usage(self) -> UsageReport:
        """Who is on the host now and the ledger's jobs and tokens per identity and day:
        everyone's for an admin, else this client's own."""

    async def watch_metrics(self, interval_ms: int = 1000) -> AsyncIterator[list[MetricsSnapshot]]:
        """Metrics every `interval_ms` (pushed by the host where the transport can)."""
        while True:
            yield await self.metrics()
            await asyncio.sleep(interval_ms / 1000)

    @abstractmethod
    async def add_engine(self, request: AddEngineRequest) -> None:
        """Load a GGUF on the host as a new engine; returns once it is loaded."""

    @abstractmethod
    async def remove_engine(self, engine_id: str) -> None: ...

    @abstractmethod
    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None: ...

    @abstractmethod
    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None: ...

    @abstractmethod
    async def resume_engine(self, engine_id: str) -> None:
        """Admit jobs again after a drain."""

    # The library (admin): Ollama's pull, delete, load (an empty request) and unload (keep_alive 0)

    @abstractmethod
    def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        """Pull `name` into the host's library: Ollama's /api/pull events (`status`, and while
        a file comes `digest`, `total`, `completed`), to `success`; a failure raises."""

    @abstractmethod
    async def delete_model(self, name: str) -> None: ...

    @abstractmethod
    async def copy_model(self, source: str, destination: str) -> None:
        """File a library model under another name too (Ollama's copy)."""

    @abstractmethod
    async def load_model(self, name: str) -> None:
        """Load a library model now (it stays for the host's keep_alive)."""

    @abstractmethod
    async def unload_model(self, name: str) -> None: ...

    @abstractmethod
    async def wait_closed(self) -> None:
        """Return when the connection to the host is gone."""

    @abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
