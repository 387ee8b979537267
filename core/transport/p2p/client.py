"""The client end of spec 000: connect to a host by server ID and chat with it.

Errors are InferErrors with the spec's codes: INVALID_SERVER_ID before any network,
HOST_OFFLINE or CONNECT_FAILED within the connect timeout, TIMEOUT_NO_RESPONSE when
`server_info` or the next chunk does not come in time, HOST_DISCONNECTED when the stream
drops, and a host's error with an unknown code surfaces its message as a generic error.
Requests are multiplexed on one connection by request_id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ...protocol import p2p
from ...protocol.common import ChatMessage
from ...protocol.errors import ErrorKind, InferError, kind_for_p2p_code
from .bridge import Bridge, PeerConnection
from .ids import parse_server_id

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
CHUNK_TIMEOUT_S = 120.0
_GONE = object()  # put on every open request's queue when the connection drops
MAX_PIECE_BYTES = 4 << 20  # the most a host may say a piece of a shared file holds
PIECES_AHEAD = 8  # pieces of a shared file read off the link before the pull takes them


def error_from(payload: p2p.ErrorPayload) -> InferError:
    precise = str(getattr(payload, "kind", ""))  # additive, from infertui hosts
    kind = ErrorKind(precise) if precise in ErrorKind.__members__ else None
    kind = kind or kind_for_p2p_code(payload.code)
    if kind is None:  # spec 000: an unknown code is a generic error showing its message
        return InferError(ErrorKind.INTERNAL, payload.message, details={"code": payload.code})
    return InferError(kind, payload.message, retry_after_ms=payload.retry_after_ms)


class ChatStream:
    """One chat on the connection: iterate for text; `end` holds how it finished."""

    def __init__(self, client: P2PClient, request_id: str, chunk_timeout: float) -> None:
        self._client = client
        self.request_id = request_id
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._chunk_timeout = chunk_timeout
        self.end: p2p.ChatEnd | None = None

    def abort(self) -> None:
        self._client._send("abort", {}, self.request_id)

    async def __aiter__(self) -> AsyncIterator[str]:
        try:
            while self.end is None:
                try:
                    # wait_for costs a task per call: only pay it when there is a wait
                    item = (
                        self._queue.get_nowait()
                        if not self._queue.empty()
                        else await asyncio.wait_for(self._queue.get(), self._chunk_timeout)
                    )
                except TimeoutError:
                    raise InferError(
                        ErrorKind.TIMEOUT_NO_RESPONSE,
                        f"no reply from the host for {self._chunk_timeout:.0f} s",
                    ) from None
                if isinstance(item, str):
                    yield item
                    continue
                if item is _GONE:
                    raise InferError(ErrorKind.HOST_DISCONNECTED, "the host went away mid-reply")
                _, payload = item
                if isinstance(payload, p2p.ChatChunk):
                    yield payload.text
                elif isinstance(payload, p2p.ChatEnd):
                    self.end = payload
                elif isinstance(payload, p2p.ErrorPayload):
                    raise error_from(payload)
        finally:
            self._client._streams.pop(self.request_id, None)

    async def text(self) -> str:
        return "".join([part async for part in self])


class P2PClient:
    """A connection to one host. Create with `await P2PClient.connect(server_id)`."""

    def __init__(self, bridge: Bridge, conn: PeerConnection, *, owns_bridge: bool = True) -> None:
        self._bridge = bridge
        self._owns_bridge = owns_bridge  # False: the bridge is shared (a topic's hosts)
        self._conn = conn
        self._ids = itertools.count(1)
        self._streams: dict[str, ChatStream] = {}
        self._replies: dict[str, asyncio.Future[tuple[p2p.Envelope, Any]]] = {}
        # pushed replies (metrics, a pull's progress): payloads, an error, or _GONE
        self._subscriptions: dict[str, asyncio.Queue[Any]] = {}
        self._room: dict[str, asyncio.Event] = {}  # a file's reader took a piece: room for more
        self._info: asyncio.Future[p2p.ServerInfo] = asyncio.get_running_loop().create_future()
        self.server_info: p2p.ServerInfo | None = None
        self._reader = asyncio.create_task(self._read(), name="p2p-client-reader")

    @classmethod
    async def connect(
        cls,
        server_id: str,
        *,
        bootstrap: Sequence[str] = (),
        connect_timeout: float = CONNECT_TIMEOUT_S,
        seed: bytes | None = None,
    ) -> P2PClient:
        """`seed` fixes this client's key (what a host's --admin list names); None: a fresh one."""
        key = parse_server_id(server_id)  # INVALID_SERVER_ID before any network
        bridge = await Bridge.start(bootstrap=bootstrap, seed=seed)
        try:
            try:
                conn = await asyncio.wait_for(bridge.connect(key), connect_timeout)
            except (TimeoutError, InferError) as err:
                if not bridge.dht_reachable:  # the trouble is on this side: say so
                    raise InferError(
                        ErrorKind.CONNECT_FAILED,
                        "no Hyperswarm DHT node answers this machine: check its network "
                        "(UDP must pass) or --bootstrap",
                    ) from None
                if isinstance(err, InferError):
                    raise
                raise InferError(
                    ErrorKind.HOST_OFFLINE,
                    f"no host answered as {server_id} within {connect_timeout:.0f} s",
                ) from None
            client = cls(bridge, conn)
            try:
                info = asyncio.shield(client._info)
                client.server_info = await asyncio.wait_for(info, connect_timeout)
            except TimeoutError:
                await client.close()
                raise InferError(
                    ErrorKind.TIMEOUT_NO_RESPONSE, "the host connected but sent no server_info"
                ) from None
            return client
        except BaseException:
            await bridge.close()
            raise

    @property
    def server_id(self) -> str:
        return self._conn.remote_id

    async def wait_info(self) -> p2p.ServerInfo:
        """The host's server_info, once it has come (raises if the host went away first)."""
        info = await asyncio.shield(self._info)
        self.server_info = info
        return info

    @property
    def own_id(self) -> str:
        """This client's key as a server ID (what the host's queue snapshots name it by)."""
        return self._bridge.server_id

    async def wait_closed(self) -> None:
        await self._conn.closed.wait()

    def _send(self, type_: str, payload: Any, request_id: str | None = None) -> None:
        self._conn.write(p2p.encode(type_, payload, request_id))

    def chat(
        self,
        *,
        prompt: str = "",
        messages: Sequence[ChatMessage] | None = None,
        model: str | None = None,
        chunk_timeout: float = CHUNK_TIMEOUT_S,
        **params: Any,
    ) -> ChatStream:
        request_id = f"r{next(self._ids)}"
        stream = ChatStream(self, request_id, chunk_timeout)
        self._streams[request_id] = stream
        if self._reader.done():  # the host has gone: say so now, not after chunk_timeout
            stream._queue.put_nowait(_GONE)
            return stream
        payload: dict[str, Any] = {"prompt": prompt, "model": model, **params}
        if messages is not None:
            payload["messages"] = [m.model_dump() for m in messages]
        self._send("chat_start", {k: v for k, v in payload.items() if v is not None}, request_id)
        return stream

    async def request(
        self,
        type_: str,
        payload: dict[str, Any] | None = None,
        *,
        wait_s: float | None = CONNECT_TIMEOUT_S,
    ) -> dict[str, Any]:
        """An additive request (engines, metrics, queue, admin) and its reply's payload;
        `wait_s=None` for operations as slow as loading a model."""
        request_id = f"q{next(self._ids)}"
        future: asyncio.Future[tuple[p2p.Envelope, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        self._replies[request_id] = future
        self._send(type_, payload or {}, request_id)
        try:
            envelope, reply = await asyncio.wait_for(future, wait_s)
        except TimeoutError:
            raise InferError(ErrorKind.TIMEOUT_NO_RESPONSE, f"no answer to '{type_}'") from None
        finally:
            self._replies.pop(request_id, None)
        if isinstance(reply, p2p.ErrorPayload):
            raise error_from(reply)
        return envelope.payload

    async def metrics(self, interval_ms: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """Metrics snapshots pushed by the host every `interval_ms` until the loop stops."""
        request_id = f"s{next(self._ids)}"
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._subscriptions[request_id] = queue
        self._send("metrics_subscribe", {"interval_ms": interval_ms}, request_id)
        try:
            while True:
                yield _pushed(await queue.get())
        finally:
            self._subscriptions.pop(request_id, None)
            self._send("unsubscribe", {}, request_id)

    async def pull(self, name: str, *, insecure: bool = False) -> AsyncIterator[dict[str, Any]]:
        """An admin's pull into the host's library: its progress events, as Ollama's /api/pull
        lines, to `{"status": "success"}`; a failure raises."""
        request_id = f"p{next(self._ids)}"
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._subscriptions[request_id] = queue
        self._send("model_pull", {"name": name, "insecure": insecure}, request_id)
        try:
            while True:
                event = _pushed(await queue.get())
                yield event
                if event.get("status") == "success":
                    return
        finally:
            self._subscriptions.pop(request_id, None)

    async def read(self, name: str, file: str, offset: int) -> AsyncIterator[bytes]:
        """One file of a model the host shares (sharing.py), from `offset`, a piece at a time;
        leaving early stops the host's reading."""
        request_id = f"b{next(self._ids)}"
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._subscriptions[request_id] = queue
        room = self._room[request_id] = asyncio.Event()
        self._send("model_read", {"name": name, "file": file, "offset": offset}, request_id)
        whole = False
        try:
            while not (event := _pushed(await queue.get())).get("done"):
                room.set()
                yield event["data"]
            whole = True
        finally:
            self._subscriptions.pop(request_id, None)
            self._room.pop(request_id, None)
            room.set()  # a piece waiting for room is let go (and dropped)
            if not whole and not self._reader.done():
                self._send("unsubscribe", {}, request_id)

    async def _read(self) -> None:
        try:
            while True:
                try:
                    line = await self._conn.reader.readuntil(b"\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    break
                if self._route_chunk(line):
                    continue
                try:
                    envelope, payload = p2p.decode_line(line)
                except InferError as err:
                    log.warning("host sent a malformed message: %s", err.message)
                    continue
                if envelope.type == "model_read" and "bytes" in envelope.payload:
                    await self._take_piece(envelope)
                    continue
                self._route(envelope, payload)
        finally:
            for stream in self._streams.values():
                stream._queue.put_nowait(_GONE)
            for pushed in self._subscriptions.values():
                pushed.put_nowait(_GONE)
            for future in self._replies.values():
                if not future.done():
                    future.set_exception(InferError(ErrorKind.HOST_DISCONNECTED, "host went away"))
            if not self._info.done():
                self._info.set_exception(InferError(ErrorKind.HOST_DISCONNECTED, "host went away"))

    async def _take_piece(self, envelope: p2p.Envelope) -> None:
        """A piece of a shared file: its length in the line, then that many raw bytes (no
        base64, no JSON: they were a pull's whole cost, sharing.py)."""
        size = envelope.payload["bytes"]
        if not isinstance(size, int) or not 0 <= size <= MAX_PIECE_BYTES:
            raise InferError(ErrorKind.BAD_MESSAGE, f"a piece of {size!r} bytes")
        data = await self._conn.reader.readexactly(size)
        rid = envelope.request_id or ""
        queue, room = self._subscriptions.get(rid), self._room.get(rid)
        while queue is not None and room is not None and queue.qsize() >= PIECES_AHEAD:
            room.clear()  # the pull's disk is behind: read no more off the link meanwhile
            if queue.qsize() >= PIECES_AHEAD:
                await room.wait()
            queue, room = self._subscriptions.get(rid), self._room.get(rid)
        if queue is not None:
            queue.put_nowait({"data": data})

    def _route_chunk(self, line: bytes) -> bool:
        """The hot path: a well-formed chat_chunk goes to its stream as text, skipping model
        validation (anything else, or anything odd, takes the full path)."""
        try:
            raw = json.loads(line)
        except ValueError:
            return False
        if not isinstance(raw, dict) or raw.get("type") != "chat_chunk":
            return False
        stream = self._streams.get(str(raw.get("request_id")))
        text = raw["payload"].get("text") if isinstance(raw.get("payload"), dict) else None
        if stream is None or not isinstance(text, str):
            return False
        stream._queue.put_nowait(text)
        return True

    def _route(self, envelope: p2p.Envelope, payload: Any) -> None:
        rid = envelope.request_id
        if isinstance(payload, p2p.ServerInfo):
            self.server_info = payload
            if not self._info.done():
                self._info.set_result(payload)
        elif rid in self._streams:
            self._streams[rid]._queue.put_nowait((envelope, payload))
        elif rid in self._subscriptions:
            error = isinstance(payload, p2p.ErrorPayload)
            self._subscriptions[rid].put_nowait(payload if error else envelope.payload)
        elif rid in self._replies:
            future = self._replies[rid]
            if not future.done():
                future.set_result((envelope, payload))
        elif isinstance(payload, p2p.ErrorPayload):
            if not self._info.done():  # refused before server_info (the allow list)
                self._info.set_exception(error_from(payload))
            log.warning("host error %s: %s", payload.code, payload.message)

    async def close(self) -> None:
        self._conn.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        if self._owns_bridge:
            await self._bridge.close()


def _pushed(item: Any) -> dict[str, Any]:
    """A pushed reply's payload; the host's error, or its going away, raised."""
    if item is _GONE:
        raise InferError(ErrorKind.HOST_DISCONNECTED, "host went away")
    if isinstance(item, p2p.ErrorPayload):
        raise error_from(item)
    payload: dict[str, Any] = item
    return payload
