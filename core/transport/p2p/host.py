"""The host end of spec 000: every Hyperswarm peer gets a PeerSession.

A session sends `server_info`, then reads NDJSON lines: `chat_start` runs a job and streams
`chat_chunk`* then `chat_end` under its request_id; `abort` cancels it (no chunk follows the
abort's `chat_end`). Requests run concurrently, up to the job limit (MODEL_BUSY beyond it).

One key may hold several connections at once (a chat window, a second window, scripts), up
to MAX_CONNECTIONS_PER_KEY; the job limit counts per connection, so each window gets its own
replies, and one key can run at most MAX_CONNECTIONS_PER_KEY x the limit. A peer that sends
a line over the cap, floods, or keeps sending garbage gets an `error` and is dropped; other
peers never notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from ...host import Ask, HostService
from ...host.reply import End, reply
from ...protocol import p2p
from ...protocol.common import ChatMessage, SamplingParams
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import TokenText
from ...protocol.shares import Priority
from ...protocol.snapshots import SnapshotKind
from ...scheduler import Job
from .admin import (
    ADMIN_TYPES,
    OPEN_TYPES,
    PULL_TYPE,
    SNAPSHOT_TYPES,
    ModelTarget,
    Subscription,
    run_admin,
)
from .bridge import Bridge, PeerConnection
from .ids import server_id, topic_key
from .sharing import SHARE_TYPES, ShareRequest, Sharing

log = logging.getLogger(__name__)

MAX_STRIKES = 5  # malformed messages before a peer is dropped
MAX_CONNECTIONS_PER_KEY = 16  # live connections one key may hold
FLOOD_LIMIT = 200  # messages per second before a peer is dropped
DROP_GRACE_S = 2.0  # a dropped peer's connection is destroyed after this
# Chunks leave at most this often per peer (the first one of a burst at once): every write
# wakes four processes (host bridge, UDX, client bridge, client), and on a box whose cores run
# llama.cpp those wake-ups cost decode speed. Ten updates a second still reads as smooth.
CHUNK_FLUSH_S = 0.1


class P2PServer:
    """Serves the host over Hyperswarm under its stable server ID."""

    name = "p2p"

    def __init__(
        self,
        service: HostService,
        *,
        seed: bytes,
        bootstrap: Iterable[str] = (),
        topics: Iterable[str] = (),
        allow: Iterable[bytes] = (),
        admins: Iterable[bytes] = (),
        sharers: Iterable[bytes] = (),
        names: Mapping[bytes, str] | None = None,
        peer_job_limit: int = 1,
    ) -> None:
        self.service = service
        self.seed = seed
        self.bootstrap = list(bootstrap)
        self.topics = list(topics)
        self.allow = frozenset(allow)
        self.admins = frozenset(admins)
        self.sharers = frozenset(sharers)  # may pull this host's models, as admins may
        self.names = dict(names or {})  # who a peer is, where the lists name it
        self.sharing = Sharing(service.library)
        self.peer_job_limit = peer_job_limit
        self.bridge: Bridge | None = None
        self.server_id = server_id(seed)
        self._sessions: set[asyncio.Task[None]] = set()
        self.connections_by_key: Counter[bytes] = Counter()
        self._bring_up: asyncio.Task[None] | None = None
        self._failure = ""  # why the swarm could not start

    def status(self) -> str:
        """The truth about reachability, for the dashboard: a host no DHT node knows cannot
        be found by its server ID, however well it listens."""
        if self._failure:
            return f"unavailable: {self._failure}"
        if self.bridge is None or (self._bring_up is not None and not self._bring_up.done()):
            return "starting"
        if not self.bridge.dht_reachable:
            return "not announced: no DHT node answers"
        return f"announced · {self.bridge.network.get('nodes')} DHT nodes"

    def reserve(self) -> None:
        """Nothing to take ahead: the bridge finds its own sockets."""

    async def start(self) -> None:
        """Start announcing in the background: the DHT may take seconds to answer (or never,
        offline), and the host serves its other faces meanwhile."""
        self._bring_up = asyncio.create_task(self._announce(), name="p2p-announce")

    async def _announce(self) -> None:
        try:
            self.bridge = await Bridge.start(bootstrap=self.bootstrap, seed=self.seed)
            self.bridge.on_connection = self._accept
            await self.bridge.listen()
            for name in self.topics:
                await self.bridge.join(topic_key(name), server=True, client=False)
        except InferError as err:
            self._failure = err.message
            log.error("Hyperswarm is unavailable: %s", err.message)
            return
        if self.bridge.dht_reachable:
            log.info("Hyperswarm: announced as %s", self.server_id)
        else:
            where = ", ".join(self.bootstrap) or "the public bootstrap nodes"
            log.warning(
                "Hyperswarm: no DHT node answered (%s): clients cannot find %s by its server "
                "ID; check this machine's network (UDP) or --bootstrap",
                where, self.server_id,
            )  # fmt: skip

    async def wait_listening(self) -> None:
        """Until the swarm listens (tests and tools that need the host reachable)."""
        if self._bring_up is not None:
            await self._bring_up
        if self.bridge is None:
            raise InferError(ErrorKind.CONNECT_FAILED, "Hyperswarm did not start (see the log)")

    def describe(self) -> str:
        return self.server_id

    async def stop(self) -> None:
        if self._bring_up is not None and not self._bring_up.done():
            self._bring_up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bring_up
        for task in list(self._sessions):
            task.cancel()
        for task in list(self._sessions):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.bridge is not None:
            await self.bridge.close()
            self.bridge = None

    def _accept(self, conn: PeerConnection) -> None:
        task = asyncio.create_task(PeerSession(self, conn).run(), name=f"peer-{conn.remote_id}")
        self._sessions.add(task)
        task.add_done_callback(self._sessions.discard)

    def server_info(self, admin: bool) -> p2p.ServerInfo:
        capabilities = {
            "max_prompt_bytes": p2p.MAX_PROMPT_BYTES,
            "peer_job_limit": self.peer_job_limit,
            "additive_types": [
                *SNAPSHOT_TYPES,
                "library",
                "usage",
                "metrics_subscribe",
                *ADMIN_TYPES,
                PULL_TYPE,
                *SHARE_TYPES,
            ],
            "admin": admin,
        }
        return self.service.server_info(capabilities, server_id=self.describe())


class PeerSession:
    """One peer's connection: reads its messages, runs its jobs, writes their streams."""

    def __init__(self, server: P2PServer, conn: PeerConnection) -> None:
        self.server = server
        self.conn = conn
        self.peer = conn.remote_id
        self.admin = conn.remote_key in server.admins
        self.identity = server.names.get(conn.remote_key) or f"p2p:{self.peer[:12]}"
        self.jobs: dict[str, Job] = {}
        self.starting: dict[str, bool] = {}  # request ids being admitted: aborted yet?
        self.streams: set[asyncio.Task[None]] = set()
        self.tasks: dict[str, asyncio.Task[None]] = {}  # subscriptions, admin operations
        self._out: list[bytes] = []
        self._flush_at: asyncio.Handle | None = None
        self._last_flush = 0.0
        self.strikes = 0
        self._window_start = time.monotonic()
        self._window_count = 0

    def send(
        self, type_: str, payload: Any, request_id: str | None = None, *, at_once: bool = True
    ) -> None:
        """Queue a message. Lines leave together: a decode step's chunks for all of a peer's
        streams in one write, and with `at_once=False` (chunks after a reply's first) at most
        every CHUNK_FLUSH_S; anything else at once, with the chunks queued before it."""
        self._out.append(p2p.encode(type_, payload, request_id))
        loop = asyncio.get_running_loop()
        if at_once:
            if self._flush_at is not None:
                self._flush_at.cancel()
            self._flush_at = loop.call_soon(self.flush)
        elif self._flush_at is None:
            wait = self._last_flush + CHUNK_FLUSH_S - loop.time()
            self._flush_at = (
                loop.call_later(wait, self.flush) if wait > 0 else loop.call_soon(self.flush)
            )

    def flush(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        if self._out:
            data, self._out = b"".join(self._out), []
            self.conn.write(data)
            self._last_flush = asyncio.get_running_loop().time()

    def send_error(self, err: InferError, request_id: str | None = None) -> None:
        self.send("error", p2p.error_payload(err), request_id)

    async def run(self) -> None:
        key, held = self.conn.remote_key, self.server.connections_by_key
        if self.server.allow and key not in self.server.allow:
            log.info("peer %s refused: not on the allow list", self.peer)
            self.refuse(InferError(ErrorKind.FORBIDDEN, "this host does not accept your key"))
            return
        if held[key] >= MAX_CONNECTIONS_PER_KEY:
            log.info("peer %s refused: %d connections already", self.peer, held[key])
            self.refuse(InferError(
                ErrorKind.CLIENT_BUSY,
                f"your key already holds {held[key]} connections to this host; close one",
            ))  # fmt: skip
            return
        held[key] += 1
        log.info("peer %s connected%s", self.peer, " (admin)" if self.admin else "")
        self.send("server_info", self.server.server_info(self.admin))
        try:
            while True:
                try:
                    line = await self.conn.reader.readuntil(b"\n")
                except asyncio.IncompleteReadError:
                    break  # the peer closed
                except asyncio.LimitOverrunError:
                    self.drop(f"a line over {p2p.MAX_LINE_BYTES} bytes")
                    break
                if self.flooding():
                    self.drop(f"more than {FLOOD_LIMIT} messages a second")
                    break
                if line.strip() and not self.handle(line):
                    break
        finally:
            for job in self.jobs.values():
                job.cancel()  # a peer that goes away cancels its jobs
            for task in [*self.streams, *self.tasks.values()]:
                task.cancel()
            self.flush()
            self.conn.close()
            held[key] -= 1
            if not held[key]:
                del held[key]
            log.info("peer %s disconnected", self.peer)

    def refuse(self, err: InferError) -> None:
        self.send_error(err)
        self.flush()
        self.conn.close()

    def flooding(self) -> bool:
        now = time.monotonic()
        if now - self._window_start >= 1.0:
            self._window_start, self._window_count = now, 0
        self._window_count += 1
        return self._window_count > FLOOD_LIMIT

    def drop(self, reason: str) -> None:
        """Say why, end the connection (so the error is delivered), and destroy it if the peer
        has not closed its side soon after."""
        log.warning("dropping peer %s: %s", self.peer, reason)
        self.send_error(InferError(ErrorKind.BAD_MESSAGE, f"dropped: {reason}"))
        self.flush()
        self.conn.close()
        asyncio.get_running_loop().call_later(DROP_GRACE_S, self.conn.destroy)

    def handle(self, line: bytes) -> bool:
        """Act on one line; False when the peer must be dropped."""
        try:
            envelope, payload = p2p.decode_line(line)
        except InferError as err:
            self.send_error(err, err.details.get("request_id"))
            self.strikes += 1
            if self.strikes >= MAX_STRIKES:
                self.drop(f"{self.strikes} malformed messages")
                return False
            return True
        rid = envelope.request_id
        try:
            if isinstance(payload, p2p.ChatStart):
                self.start_chat(rid or "", payload)
            elif envelope.type == "abort":
                job = self.jobs.get(rid or "")
                if job is not None:
                    job.cancel()
                elif rid in self.starting:
                    self.starting[rid] = True
            elif envelope.type in SNAPSHOT_TYPES:
                kind = SnapshotKind(envelope.type)
                self.send(kind, self.server.service.snapshot(kind), rid)
            elif envelope.type == "library":
                self.spawn(f"library:{rid}", self.send_library(rid))
            elif envelope.type == "usage":
                self.spawn(f"usage:{rid}", self.send_usage(rid))
            elif envelope.type == "metrics_subscribe":
                self.subscribe(rid or "", Subscription.model_validate(envelope.payload))
            elif envelope.type == "unsubscribe":
                self.cancel_task(rid or "")
            elif envelope.type in ADMIN_TYPES:
                self.admin_operation(envelope.type, envelope.payload, rid)
            elif envelope.type == PULL_TYPE:
                self.pull(envelope.payload, rid)
            elif envelope.type in SHARE_TYPES:
                self.share(envelope.type, envelope.payload, rid)
            elif payload is None:
                raise InferError(ErrorKind.BAD_MESSAGE, f"unknown message type '{envelope.type}'")
        except InferError as err:
            self.send_error(err, rid)
        except ValidationError as err:
            self.send_error(InferError(ErrorKind.BAD_MESSAGE, str(err.errors()[0]["msg"])), rid)
        return True

    def spawn(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks[key] = task
        task.add_done_callback(lambda _: self.tasks.pop(key, None))

    def cancel_task(self, key: str) -> None:
        task = self.tasks.get(key)
        if task is not None:
            task.cancel()

    def subscribe(self, rid: str, subscription: Subscription) -> None:
        async def push() -> None:
            while True:
                self.send("metrics", self.server.service.snapshot(SnapshotKind.METRICS), rid)
                await asyncio.sleep(subscription.interval_ms / 1000)

        self.cancel_task(rid)
        self.spawn(rid, push())

    async def send_library(self, rid: str | None) -> None:
        try:
            entries = await self.server.service.library_entries()
        except Exception as exc:  # a manifest broken by hand: said, never a silent end
            log.warning("cannot list the library: %s", exc)
            self.send_error(InferError(ErrorKind.INTERNAL, f"cannot list the library: {exc}"), rid)
            return
        self.send("library", {"models": [e.model_dump(mode="json") for e in entries]}, rid)

    async def send_usage(self, rid: str | None) -> None:
        """Who used the host: everyone's for an admin peer, else this peer's own."""
        who = None if self.admin else self.identity
        report = await self.server.service.usage.report(identity=who)
        self.send("usage", report.model_dump(mode="json"), rid)

    def admin_operation(self, kind: str, payload: dict[str, Any], rid: str | None) -> None:
        if kind not in OPEN_TYPES:
            self.check_admin(kind)

        async def run() -> None:
            try:
                self.send(kind, await run_admin(self.server.service, kind, payload), rid)
            except InferError as err:
                self.send_error(err, rid)
            except ValidationError as err:
                self.send_error(InferError(ErrorKind.BAD_MESSAGE, str(err.errors()[0]["msg"])), rid)

        engine = str(payload.get("engine_id", ""))[:128]  # not validated yet: a bounded excerpt
        log.info("peer %s (admin): %s %s", self.peer, kind, engine)
        self.spawn(f"admin:{rid}", run())

    def pull(self, payload: dict[str, Any], rid: str | None) -> None:
        """An admin's pull into the host's library: its progress as it comes."""
        self.check_admin(PULL_TYPE)
        model = ModelTarget.model_validate(payload)
        log.info("peer %s (admin): %s %s", self.peer, PULL_TYPE, model.name)

        async def run() -> None:
            try:
                async for event in self.server.service.pull_model(
                    model.name, insecure=model.insecure
                ):
                    self.send(PULL_TYPE, event, rid)
            except InferError as err:
                self.send_error(err, rid)

        self.spawn(f"pull:{rid}", run())

    def share(self, kind: str, payload: dict[str, Any], rid: str | None) -> None:
        """Another host pulls one of this host's models (sharing.py)."""
        if not (self.admin or self.conn.remote_key in self.server.sharers):
            raise InferError(
                ErrorKind.FORBIDDEN,
                "this host does not share its models with your key (its host.p2p.share)",
            )
        asked = ShareRequest.model_validate(payload)
        sharing = self.server.sharing

        async def run() -> None:
            try:
                if kind == "model_share":
                    self.send(kind, await sharing.manifest(asked.name), rid)
                    return
                log.info("peer %s pulls %s/%s from byte %d", self.peer, asked.name,
                         asked.file, asked.offset)  # fmt: skip
                async for piece in sharing.pieces(asked.name, asked.file or "", asked.offset):
                    self.send(kind, {"bytes": len(piece)}, rid)
                    self._out.append(piece)  # raw, right after its line
                    self.flush()
                    await self.conn.drain()  # at the link's pace, not the disk's
                self.send(kind, {"done": True}, rid)
            except InferError as err:
                self.send_error(err, rid)
            except Exception as exc:  # a file gone or unreadable: said, never a silent end
                log.warning("sharing %s with %s failed: %s", asked.name, self.peer, exc)
                self.send_error(InferError(ErrorKind.INTERNAL, f"cannot share it: {exc}"), rid)

        self.spawn(rid or "", run())  # by its request id: `unsubscribe` stops a read

    def check_admin(self, kind: str) -> None:
        if not self.admin:
            raise InferError(
                ErrorKind.FORBIDDEN, f"'{kind}' needs this peer's key in the host's --admin list"
            )

    def start_chat(self, rid: str, start: p2p.ChatStart) -> None:
        wanted = start.protocol_version
        if wanted is not None and wanted > p2p.PROTOCOL_VERSION:
            raise InferError(
                ErrorKind.UNSUPPORTED_VERSION,
                f"protocol version {wanted} requested; this host speaks {p2p.PROTOCOL_VERSION}",
            )
        if rid in self.jobs or rid in self.starting:
            raise InferError(ErrorKind.BAD_MESSAGE, f"request_id '{rid}' is already running")
        messages = start.messages or [ChatMessage(role="user", content=start.prompt)]
        if start.system:
            messages = [ChatMessage(role="system", content=start.system), *messages]
        self.starting[rid] = False  # not aborted (yet)
        task = asyncio.create_task(
            self.chat(rid, messages, SamplingParams.of(start), start.model, start.priority)
        )
        self.streams.add(task)
        task.add_done_callback(self.streams.discard)

    async def chat(
        self,
        rid: str,
        messages: list[ChatMessage],
        params: SamplingParams,
        model: str | None,
        priority: Priority | None,
    ) -> None:
        """Admit the job (its prompt is tokenized off the event loop), then stream it."""
        try:
            ask = Ask(
                model=model,
                messages=messages,
                params=params,
                client_id=f"p2p:{self.peer[:12]}/{self.conn.conn}",  # a limit per connection
                client_limit=self.server.peer_job_limit,
                identity=self.identity,
                priority=priority,
            )
            job = await self.server.service.submit(ask)
        except InferError as err:
            self.send_error(err, rid)
            return
        finally:
            aborted = self.starting.pop(rid, False)
        self.jobs[rid] = job
        if aborted:  # the peer aborted while its prompt was being tokenized
            job.cancel()
        await self.stream(rid, job)

    async def stream(self, rid: str, job: Job) -> None:
        index = 0
        try:
            async for piece in reply(job):
                if isinstance(piece, TokenText):
                    chunk = {"text": piece.text, "index": index}
                    self.send("chat_chunk", chunk, rid, at_once=index == 0)  # fast first token
                    index += 1
                    await self.conn.drain()
                elif isinstance(piece, End):
                    if piece.final.error is not None:
                        self.send_error(piece.final.error, rid)
                        return
                    t = piece.final.timings
                    end = p2p.ChatEnd(
                        finish_reason=piece.final.finish_reason,
                        tokens_in=t.tokens_in,
                        tokens_out=t.tokens_out,
                        ttft_ms=round(t.ttft_ms, 1) if t.ttft_ms is not None else None,
                        tokens_per_s=round(t.decode_tps, 1),
                        model=job.pool_id,
                    )
                    self.send("chat_end", end, rid)
        finally:
            self.jobs.pop(rid, None)
