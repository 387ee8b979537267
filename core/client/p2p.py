"""The Client API over Hyperswarm: spec 000 chat plus infertui's additive messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..protocol.common import ChatMessage
from ..protocol.host_api import AddEngineRequest
from ..protocol.shares import UsageReport
from ..protocol.snapshots import EngineStatus, LibraryEntry, MetricsSnapshot, QueueSnapshot
from ..transport.p2p.client import ChatStream, P2PClient
from .base import ChatReply, ChatStats, Client, HostInfo


class P2PReply(ChatReply):
    def __init__(self, stream: ChatStream) -> None:
        self._stream = stream
        self.request_id = stream.request_id
        self._aborted = False

    async def __aiter__(self) -> AsyncIterator[str]:
        async for text in self._stream:
            yield text
        end = self._stream.end
        if end is not None:
            self.stats = ChatStats(
                finish_reason=end.finish_reason,
                tokens_in=end.tokens_in,
                tokens_out=end.tokens_out or 0,
                ttft_ms=end.ttft_ms,
                tokens_per_s=end.tokens_per_s or 0.0,
                model=end.model or "",
                host_stopped="" if end.finish_reason == "abort" and not self._aborted else None,
            )

    def abort(self) -> None:
        self._aborted = True
        self._stream.abort()


class P2PHostClient(Client):
    """A host reached by server ID."""

    def __init__(self, peer: P2PClient) -> None:
        self._peer = peer
        info = peer.server_info
        assert info is not None  # P2PClient.connect waits for server_info
        self.info = HostInfo(
            host_name=info.host_name,
            model=info.model,
            models=tuple(info.models or ([info.model] if info.model else [])),
            status=info.status,
            address=peer.server_id,
            transport="p2p",
            admin=bool(info.capabilities.get("admin")),
            extra={"protocol_version": info.protocol_version, **info.capabilities},
        )
        self.queue_client_id = f"p2p:{peer.own_id[:12]}"

    @classmethod
    async def connect(
        cls,
        server_id: str,
        *,
        bootstrap: Sequence[str] = (),
        connect_timeout: float = 10.0,
        seed: bytes | None = None,
    ) -> P2PHostClient:
        peer = await P2PClient.connect(
            server_id, bootstrap=bootstrap, connect_timeout=connect_timeout, seed=seed
        )
        return cls(peer)

    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply:
        return P2PReply(self._peer.chat(messages=messages, model=model, **params))

    async def engines(self) -> list[EngineStatus]:
        reply = await self._peer.request("engines")
        return [EngineStatus.model_validate(e) for e in reply.get("engines", [])]

    async def library(self) -> list[LibraryEntry]:
        reply = await self._peer.request("library")
        return [LibraryEntry.model_validate(m) for m in reply.get("models", [])]

    async def queue(self) -> list[QueueSnapshot]:
        reply = await self._peer.request("queue")
        return [QueueSnapshot.model_validate(q) for q in reply.get("pools", [])]

    async def metrics(self) -> list[MetricsSnapshot]:
        reply = await self._peer.request("metrics")
        return [MetricsSnapshot.model_validate(m) for m in reply.get("pools", [])]

    async def usage(self) -> UsageReport:
        return UsageReport.model_validate(await self._peer.request("usage"))

    async def watch_metrics(self, interval_ms: int = 1000) -> AsyncIterator[list[MetricsSnapshot]]:
        async for reply in self._peer.metrics(interval_ms):
            yield [MetricsSnapshot.model_validate(m) for m in reply.get("pools", [])]

    async def add_engine(self, request: AddEngineRequest) -> None:
        payload = request.model_dump(exclude_unset=True)
        await self._peer.request("engine_add", payload, wait_s=None)

    async def remove_engine(self, engine_id: str) -> None:
        await self._peer.request("engine_remove", {"engine_id": engine_id})

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None:
        payload = {"engine_id": engine_id, "model_path": model_path}
        await self._peer.request("engine_reload", payload, wait_s=None)

    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None:
        payload = {"engine_id": engine_id, "deadline_ms": deadline_ms}
        await self._peer.request("engine_drain", payload, wait_s=None)

    async def resume_engine(self, engine_id: str) -> None:
        await self._peer.request("engine_resume", {"engine_id": engine_id})

    async def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        async for event in self._peer.pull(name):
            yield event

    async def delete_model(self, name: str) -> None:
        await self._peer.request("model_delete", {"name": name})

    async def copy_model(self, source: str, destination: str) -> None:
        await self._peer.request("model_copy", {"name": source, "destination": destination})

    async def load_model(self, name: str) -> None:
        await self._peer.request("model_load", {"name": name}, wait_s=None)

    async def unload_model(self, name: str) -> None:
        await self._peer.request("model_unload", {"name": name})

    async def wait_closed(self) -> None:
        await self._peer.wait_closed()

    async def close(self) -> None:
        await self._peer.close()
