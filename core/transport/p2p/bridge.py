"""Bridge: the Node.js Hyperswarm process, driven over NDJSON on its stdin and stdout.

Each peer connection's bytes feed its own asyncio StreamReader; writes go out as commands.
When every bootstrap node is a loopback address (a test DHT), the bridge binds to 127.0.0.1
and runs non-firewalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from ...protocol.errors import ErrorKind, InferError
from ...protocol.p2p import MAX_LINE_BYTES
from .ids import z32_encode
from .runtime import BRIDGE_DIR, ensure_installed, node_executable

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0


def is_loopback_only(bootstrap: Sequence[str]) -> bool:
    if not bootstrap:
        return False
    for entry in bootstrap:
        host = entry.rpartition(":")[0].strip("[]")
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:
            if host != "localhost":
                return False
    return True


class PeerConnection:
    """One encrypted connection to a peer, identified by its public key."""

    def __init__(self, bridge: Bridge, conn: int, remote_key: bytes, initiator: bool) -> None:
        self._bridge = bridge
        self.conn = conn
        self.remote_key = remote_key
        self.initiator = initiator
        # a line longer than the protocol's cap fails readuntil with LimitOverrunError
        self.reader = asyncio.StreamReader(limit=MAX_LINE_BYTES + 1)
        self.closed = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def remote_id(self) -> str:
        return z32_encode(self.remote_key)

    def write(self, data: bytes) -> None:
        if not self.closed.is_set():
            self._bridge.write(self.conn, data)

    async def drain(self) -> None:
        """Wait while the peer's socket or the bridge's stdin is backed up (or until closed)."""
        if self._writable.is_set() and not self._bridge.backed_up():
            return  # the per-token path: nothing to wait for
        if not self._writable.is_set():
            closed = asyncio.ensure_future(self.closed.wait())
            writable = asyncio.ensure_future(self._writable.wait())
            await asyncio.wait({closed, writable}, return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            writable.cancel()
        await self._bridge.drain()

    def close(self) -> None:
        """End our side; the peer sees end of stream."""
        if not self.closed.is_set():
            self._bridge.send("end", conn=self.conn)

    def destroy(self) -> None:
        if not self.closed.is_set():
            self._bridge.send("destroy", conn=self.conn)

    def _on_pressure(self, paused: bool) -> None:
        if paused:
            self._writable.clear()
        else:
            self._writable.set()

    def _on_close(self) -> None:
        if not self.reader.at_eof():
            self.reader.feed_eof()
        self.closed.set()
        self._writable.set()


class Bridge:
    """A running bridge process with its swarm. Create with `await Bridge.start(...)`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._conns: dict[int, PeerConnection] = {}
        self._dialed: dict[bytes, PeerConnection] = {}  # opened by connect(), not yet taken
        self._ready: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.public_key = b""
        # the DHT as the bridge last saw it: {"online", "degraded", "nodes"}
        self.network: dict[str, Any] = {}
        # every new connection, both the ones peers open and the ones a topic join opens
        self.on_connection: Callable[[PeerConnection], None] | None = None
        self._tasks = [
            asyncio.create_task(self._read_events(), name="bridge-events"),
            asyncio.create_task(self._read_stderr(), name="bridge-stderr"),
        ]

    @classmethod
    async def start(cls, *, bootstrap: Sequence[str] = (), seed: bytes | None = None) -> Bridge:
        node = node_executable()
        modules = await asyncio.to_thread(ensure_installed)
        proc = await asyncio.create_subprocess_exec(
            node, str(BRIDGE_DIR / "bridge.js"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=2 * MAX_LINE_BYTES + 1024,
            env={**os.environ, "NODE_PATH": str(modules)},
        )  # fmt: skip
        bridge = cls(proc)
        local = is_loopback_only(bootstrap)
        try:
            await asyncio.wait_for(
                bridge.command(
                    "init",
                    bootstrap=list(bootstrap),
                    seed=seed.hex() if seed else None,
                    host="127.0.0.1" if local else None,
                    firewalled=not local,
                ),
                START_TIMEOUT_S,
            )
            bridge.public_key = await asyncio.wait_for(bridge._ready, START_TIMEOUT_S)
        except (TimeoutError, InferError):
            await bridge.close()
            raise
        return bridge

    @property
    def server_id(self) -> str:
        return z32_encode(self.public_key)

    # ---- commands ----------------------------------------------------------------------------

    def send(self, cmd: str, **fields: Any) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        stdin.write(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")

    def write(self, conn: int, data: bytes) -> None:
        """Payload bytes go raw after a `W<conn> <length>` header line: no JSON, no base64."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(b"W%d %d\n%b" % (conn, len(data), data))

    def backed_up(self) -> bool:
        stdin = self._proc.stdin
        return stdin is not None and stdin.transport.get_write_buffer_size() > 0

    async def drain(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            with contextlib.suppress(ConnectionError):
                await self._proc.stdin.drain()

    async def command(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send a command and wait for its `done` (or raise its `error`)."""
        request = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request] = future
        self.send(cmd, id=request, **fields)
        try:
            return await future
        finally:
            self._pending.pop(request, None)

    @property
    def dht_reachable(self) -> bool:
        """Whether any DHT node answered: without one, nobody can look us up."""
        return bool(self.network.get("nodes")) and self.network.get("online") is not False

    async def listen(self) -> None:
        await self.command("listen")

    async def join(self, topic: bytes, *, server: bool, client: bool) -> None:
        await self.command("join", topic=topic.hex(), server=server, client=client)

    async def refresh(self, topic: bytes) -> None:
        """Look a joined topic up again now (Hyperswarm does so only every 10 minutes)."""
        await self.command("refresh", topic=topic.hex())

    async def leave(self, topic: bytes) -> None:
        await self.command("leave", topic=topic.hex())

    async def connect(self, key: bytes) -> PeerConnection:
        """Open a connection to the peer with this public key (errors carry the DHT's reason)."""
        await self.command("connect", key=key.hex())
        conn = self._dialed.pop(key, None)
        if conn is None:
            raise InferError(ErrorKind.CONNECT_FAILED, "the bridge reported no connection")
        return conn  # possibly closed already; its reader still holds what the host said

    async def close(self) -> None:
        """Shut the swarm down and wait for the process (it also exits when stdin closes)."""
        if self._proc.returncode is None:
            self.send("shutdown")
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        for task in self._tasks:
            task.cancel()
        for conn in list(self._conns.values()):
            conn._on_close()

    # ---- events ------------------------------------------------------------------------------

    async def _read_events(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                break  # the bridge exited
            except asyncio.LimitOverrunError as err:  # never from our bridge; survive anyway
                await stdout.readexactly(err.consumed)
                log.error("bridge event over %d bytes skipped", err.consumed)
                continue
            if line[:1] == b"D":  # `D<conn> <length>` and then that many raw bytes
                conn_id, _, length = line[1:-1].partition(b" ")
                try:
                    data = await stdout.readexactly(int(length))
                except asyncio.IncompleteReadError:
                    break
                conn = self._conns.get(int(conn_id))
                if conn is not None:
                    conn.reader.feed_data(data)
                continue
            try:
                self._on_event(json.loads(line))
            except Exception:
                log.exception("bridge event could not be handled: %.200s", line)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(InferError(ErrorKind.CONNECT_FAILED, "the bridge exited"))
        if not self._ready.done():
            self._ready.set_exception(InferError(ErrorKind.CONNECT_FAILED, "the bridge exited"))
        for conn in list(self._conns.values()):
            conn._on_close()

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        conn = self._conns.get(event.get("conn", -1))
        if kind == "open":
            key = bytes.fromhex(event["remoteKey"])
            opened = PeerConnection(self, event["conn"], key, event["initiator"])
            self._conns[opened.conn] = opened
            if opened.initiator:
                self._dialed[key] = opened  # for connect(), which waits on this key
            if self.on_connection is not None:
                self.on_connection(opened)
        elif kind == "end" and conn is not None:
            conn.reader.feed_eof()
        elif kind == "close" and conn is not None:
            self._conns.pop(conn.conn, None)
            conn._on_close()
        elif kind == "pressure" and conn is not None:
            conn._on_pressure(bool(event["paused"]))
        elif kind in ("ready", "network"):
            self.network = {key: event.get(key) for key in ("online", "degraded", "nodes")}
            if kind == "ready" and not self._ready.done():
                self._ready.set_result(bytes.fromhex(event["publicKey"]))
        elif kind in ("done", "error") and event.get("id") in self._pending:
            future = self._pending[event["id"]]
            if future.done():
                return
            if kind == "done":
                future.set_result(event)
            else:
                future.set_exception(_bridge_error(event))
        elif kind == "error":
            log.debug("bridge: %s", event.get("message"))

    async def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        async for line in self._proc.stderr:
            log.warning("bridge: %s", line.decode(errors="replace").rstrip())


def _bridge_error(event: dict[str, Any]) -> InferError:
    code = event.get("code") or ""
    message = event.get("message") or "Hyperswarm error"
    if code == "PEER_NOT_FOUND":
        return InferError(ErrorKind.HOST_OFFLINE, "no host is announcing that server ID")
    if code == "PEER_CONNECTION_FAILED":
        message = "the host is announced but did not answer: it may have just stopped"
    else:  # hyperdht's messages begin with their code: said once, at the end
        message = message.removeprefix(f"{code}: ") if code else message
    return InferError(ErrorKind.CONNECT_FAILED, f"{message} ({code or 'Hyperswarm'})")
