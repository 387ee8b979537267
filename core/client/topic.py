"""The hosts on a topic as one client: `await connect("topic:NAME")`.

Every host that announces on the topic is connected, over one Hyperswarm bridge. A chat goes
to the host with the most room: its free slots less its queued jobs, from the metrics it
pushes every second, less the chats this client has sent it since. A refusal for load
(MODEL_BUSY, QUEUE_FULL, CLIENT_BUSY, POOL_UNREADY) or a host that drops before the first text
is retried on the next host; only when every host has refused is the last refusal reported.
A host that leaves is dropped from the choice. Once none is left, the client counts as closed,
so that a Reconnector looks the topic up again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Coroutine, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ..protocol import p2p
from ..protocol.common import ChatMessage
from ..protocol.errors import ErrorKind, InferError
from ..protocol.host_api import AddEngineRequest
from ..protocol.shares import UsageReport
from ..protocol.snapshots import EngineStatus, MetricsSnapshot, QueueSnapshot, load_of
from ..transport.p2p.bridge import Bridge, PeerConnection
from ..transport.p2p.client import P2PClient
from ..transport.p2p.ids import topic_key
from .base import ChatReply, ChatStats, Client, HostInfo, HostLoad
from .p2p import P2PReply

log = logging.getLogger(__name__)

TOPIC_PREFIX = "topic:"
METRICS_INTERVAL_MS = 1000
LOOKUP_FIRST_S = 1.0  # the topic is looked up again after this, doubling up to LOOKUP_EVERY_S,
LOOKUP_EVERY_S = 30.0  # so that hosts that announce after the client joined are met
# Refusals another host may not give: tried on the next one before they are reported.
ELSEWHERE = frozenset(
    {
        ErrorKind.MODEL_NOT_FOUND,  # hosts on one topic may serve different models
        ErrorKind.QUEUE_FULL,
        ErrorKind.CLIENT_BUSY,
        ErrorKind.RATE_LIMITED,  # another host keeps its own budgets
        ErrorKind.BUDGET_SPENT,
        ErrorKind.POOL_UNREADY,
        ErrorKind.HOST_DISCONNECTED,
        ErrorKind.TIMEOUT_NO_RESPONSE,
    }
)


@dataclass(slots=True)
class TopicHost:
    """One host on the topic and its load, as last reported."""

    peer: P2PClient
    info: p2p.ServerInfo
    slots: int = 0
    free_slots: int = 0
    queue_depth: int = 0
    sent: int = 0  # chats this client sent it since its last report

    @property
    def server_id(self) -> str:
        return self.peer.server_id

    @property
    def room(self) -> int:
        return self.free_slots - self.queue_depth - self.sent

    def report(self, load: dict[str, Any]) -> None:
        """Its load as `load_of` gives it (in server_info, or from its pools' metrics)."""
        self.slots = int(load.get("slots", 0))
        self.free_slots = int(load.get("free_slots", 0))
        self.queue_depth = int(load.get("queue_depth", 0))
        self.sent = 0


class TopicReply(ChatReply):
    """A chat on whichever host has room; `host` names the one that answered."""

    def __init__(
        self,
        client: TopicClient,
        messages: Sequence[ChatMessage],
        model: str | None,
        params: dict[str, Any],
    ) -> None:
        self._client = client
        self._ask = (messages, model, params)
        self._current: P2PReply | None = None
        self._aborted = False
        self.host = ""

    def abort(self) -> None:
        self._aborted = True
        if self._current is not None:
            self._current.abort()

    async def __aiter__(self) -> AsyncIterator[str]:
        messages, model, params = self._ask
        tried: set[str] = set()
        while True:
            host = self._client.pick(model, exclude=tried)
            tried.add(host.server_id)
            host.sent += 1
            reply = P2PReply(host.peer.chat(messages=messages, model=model, **params))
            self._current, self.host, self.request_id = reply, host.info.host_name, reply.request_id
            if self._aborted:
                reply.abort()
            started, error = False, None
            try:
                async for text in reply:
                    started = True
                    yield text
            except InferError as err:
                error = err
            why = None if started or self._aborted else _not_taken(error, reply.stats)
            if why and self._client.other_than(tried):  # another host will do
                if error is not None:
                    reply.abort()  # a request that timed out may still be queued there
                log.info("%s refused a chat (%s); trying another host", self.host, why)
                continue
            if error is not None:
                raise error
            stats = reply.stats
            if stats is not None:
                self.stats = dataclasses.replace(stats, host=self.host)
            return


def _not_taken(error: InferError | None, stats: ChatStats | None) -> str | None:
    """Why a host did not take a chat that no text came from, where another host may: a
    refusal for load, a host gone, or one that stopped it as it shut down."""
    if error is not None:
        return error.kind.value if error.kind in ELSEWHERE else None
    return "stopped" if stats is not None and stats.finish_reason == "abort" else None


class TopicClient(Client):
    """The hosts on one topic. Create with `await TopicClient.connect(name)`."""

    def __init__(self, topic: str, bridge: Bridge) -> None:
        self.topic = topic
        self._bridge = bridge
        self._hosts: dict[str, TopicHost] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._some = asyncio.Event()  # set while at least one host is connected
        self._closed = asyncio.Event()
        self.queue_client_id = f"p2p:{bridge.server_id[:12]}"
        self.info = HostInfo(
            host_name=f"topic {topic}", model="", models=(), status="ready",
            address=f"{TOPIC_PREFIX}{topic}", transport="p2p", admin=False,
        )  # fmt: skip

    @classmethod
    async def connect(
        cls,
        topic: str,
        *,
        bootstrap: Sequence[str] = (),
        connect_timeout: float = 10.0,
        seed: bytes | None = None,
    ) -> TopicClient:
        """Join the topic and wait for its first host; HOST_OFFLINE when none comes."""
        if not topic:
            raise InferError(ErrorKind.INVALID_SERVER_ID, "a topic needs a name: topic:NAME")
        bridge = await Bridge.start(bootstrap=bootstrap, seed=seed)
        client = cls(topic, bridge)
        bridge.on_connection = client._on_connection
        try:
            await asyncio.wait_for(
                bridge.join(topic_key(topic), server=False, client=True), connect_timeout
            )
            client._spawn(client._look_again(), "topic lookups")
            await asyncio.wait_for(client._some.wait(), connect_timeout)
        except TimeoutError:
            await client.close()
            raise InferError(
                ErrorKind.HOST_OFFLINE,
                f"no host announces on topic {topic!r} (waited {connect_timeout:.0f} s)",
            ) from None
        except BaseException:
            await client.close()
            raise
        return client

    # ---- hosts -------------------------------------------------------------------------------

    def connected(self) -> list[TopicHost]:
        """The hosts connected now, most room first."""
        return sorted(self._hosts.values(), key=lambda h: (-h.room, h.info.host_name))

    async def hosts(self) -> list[HostLoad]:
        return [
            HostLoad(
                h.info.host_name,
                h.server_id,
                tuple(h.info.models),
                h.slots,
                h.free_slots,
                h.queue_depth,
            )
            for h in self.connected()
        ]

    def pick(self, model: str | None = None, exclude: AbstractSet[str] = frozenset()) -> TopicHost:
        """The host with the most room (a random one among equals, so that clients spread),
        among those that serve `model` where any does."""
        hosts = [h for h in self._hosts.values() if h.server_id not in exclude]
        serving = [h for h in hosts if model in (h.info.models or ())]
        hosts = serving if model and serving else hosts
        if not hosts:
            raise InferError(
                ErrorKind.HOST_OFFLINE, f"no host on topic {self.topic!r} is connected now"
            )
        best = max(h.room for h in hosts)
        return random.choice([h for h in hosts if h.room == best])

    def other_than(self, tried: set[str]) -> bool:
        return any(server_id not in tried for server_id in self._hosts)

    def _on_connection(self, conn: PeerConnection) -> None:
        self._spawn(self._keep(conn), f"topic host {conn.remote_id[:12]}")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _look_again(self) -> None:
        """Hosts that announce later (a restart, a new box) are met within LOOKUP_EVERY_S."""
        wait = LOOKUP_FIRST_S
        while True:
            await asyncio.sleep(wait)
            wait = min(LOOKUP_EVERY_S, wait * 2)
            try:
                await self._bridge.refresh(topic_key(self.topic))
            except InferError as err:
                log.info("topic %s: lookup failed: %s", self.topic, err.message)

    async def _keep(self, conn: PeerConnection) -> None:
        """One host: greet it, follow its load, and drop it when it leaves."""
        peer = P2PClient(self._bridge, conn, owns_bridge=False)
        try:
            info = await asyncio.wait_for(peer.wait_info(), 10)
        except (TimeoutError, InferError):
            await peer.close()
            return
        except BaseException:
            await peer.close()
            raise
        # A second connection to a host (it restarted, or both sides dialled) takes the
        # host's place; the first serves what it has running until it closes.
        host = TopicHost(peer, info)
        host.report(info.capabilities.get("load") or {})
        self._hosts[peer.server_id] = host
        self._changed()
        log.info("topic %s: %s joined (%s)", self.topic, info.host_name, peer.server_id[:12])
        watch = asyncio.create_task(self._follow(host))
        try:
            await peer.wait_closed()
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            if self._hosts.get(peer.server_id) is host:
                del self._hosts[peer.server_id]
                log.info("topic %s: %s left", self.topic, info.host_name)
                self._changed()
            await peer.close()

    async def _follow(self, host: TopicHost) -> None:
        """The host's load, as its metrics come; a host that cannot send them is still
        chosen, on what it said when it connected."""
        try:
            async for reply in host.peer.metrics(METRICS_INTERVAL_MS):
                pools = reply.get("pools")
                if isinstance(pools, list):
                    host.report(load_of([MetricsSnapshot.model_validate(m) for m in pools]))
        except (InferError, ValueError) as err:
            log.info("topic %s: no load from %s: %s", self.topic, host.info.host_name, err)

    def _changed(self) -> None:
        models = sorted({m for h in self._hosts.values() for m in (h.info.models or [])})
        names = ", ".join(sorted(h.info.host_name for h in self._hosts.values()))
        self.info = HostInfo(
            host_name=f"topic {self.topic} ({len(self._hosts)} hosts: {names})",
            model=models[0] if models else "", models=tuple(models),
            status="ready" if self._hosts else "offline",
            address=f"{TOPIC_PREFIX}{self.topic}", transport="p2p", admin=False,
        )  # fmt: skip
        if self._hosts:
            self._some.set()
        elif self._some.is_set():  # the last one left: a Reconnector looks the topic up anew
            self._some.clear()
            self._closed.set()

    # ---- the Client API ----------------------------------------------------------------------

    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply:
        return TopicReply(self, messages, model, params)

    async def update_info(self) -> bool:
        before = (self.info.models, self.info.model)
        self._changed()
        return (self.info.models, self.info.model) != before

    async def _each(self, type_: str, key: str) -> list[tuple[TopicHost, list[dict[str, Any]]]]:
        hosts = list(self._hosts.values())
        replies = await asyncio.gather(
            *(h.peer.request(type_) for h in hosts), return_exceptions=True
        )
        return [
            (host, reply.get(key, []))
            for host, reply in zip(hosts, replies, strict=True)
            if isinstance(reply, dict)
        ]

    async def engines(self) -> list[EngineStatus]:
        """Every host's engines, named HOST/ENGINE."""
        return [
            EngineStatus.model_validate({**e, "engine_id": f"{h.info.host_name}/{e['engine_id']}"})
            for h, rows in await self._each("engines", "engines")
            for e in rows
        ]

    async def queue(self) -> list[QueueSnapshot]:
        return [
            QueueSnapshot.model_validate({**q, "pool_id": f"{h.info.host_name}/{q['pool_id']}"})
            for h, rows in await self._each("queue", "pools")
            for q in rows
        ]

    async def usage(self) -> UsageReport:
        """Every host's, each identity named IDENTITY@HOST."""
        days, users, kept = [], [], False
        for host in list(self._hosts.values()):
            try:
                report = UsageReport.model_validate(await host.peer.request("usage"))
            except InferError:  # a host that left meanwhile, or an older one
                continue
            at = f"@{host.info.host_name}"
            days += [d.model_copy(update={"identity": d.identity + at}) for d in report.days]
            users += [u.model_copy(update={"identity": u.identity + at}) for u in report.users]
            kept = kept or report.ledger
        return UsageReport(days=tuple(days), users=tuple(users), ledger=kept)

    async def metrics(self) -> list[MetricsSnapshot]:
        return [
            MetricsSnapshot.model_validate({**m, "pool_id": f"{h.info.host_name}/{m['pool_id']}"})
            for h, rows in await self._each("metrics", "pools")
            for m in rows
        ]

    async def watch_metrics(self, interval_ms: int = 1000) -> AsyncIterator[list[MetricsSnapshot]]:
        while not self._closed.is_set():
            yield await self.metrics()
            await asyncio.sleep(interval_ms / 1000)

    def _one_host_only(self) -> InferError:
        return InferError(
            ErrorKind.INVALID_PARAMS,
            "engines are managed on one host: connect to it by its server ID",
        )

    async def add_engine(self, request: AddEngineRequest) -> None:
        raise self._one_host_only()

    async def remove_engine(self, engine_id: str) -> None:
        raise self._one_host_only()

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None:
        raise self._one_host_only()

    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None:
        raise self._one_host_only()

    async def resume_engine(self, engine_id: str) -> None:
        raise self._one_host_only()

    async def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        raise self._one_host_only()
        yield {}  # an async generator, as the others are

    async def delete_model(self, name: str) -> None:
        raise self._one_host_only()

    async def copy_model(self, source: str, destination: str) -> None:
        raise self._one_host_only()

    async def load_model(self, name: str) -> None:
        raise self._one_host_only()

    async def unload_model(self, name: str) -> None:
        raise self._one_host_only()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
        self._bridge.on_connection = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._bridge.close()
