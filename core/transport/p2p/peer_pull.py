"""`infertui pull peer:<server-id>/<name>`: a model from another infertui host's library, over
Hyperswarm (the serving side: sharing.py); `peer:topic:<topic>/<name>` asks the hosts that
announce on a topic and takes it from the first that shares it. The files come as any pull's
do (library/pull.py): into a partial file, resumed from where a cut pull stopped, hashed as
they come and filed only once each sha256 is the one the serving host published. The model is
filed under the name it has there.

The pull's thread writes and hashes; the event loop reads the pieces off the connection and
hands them over through a bounded queue, so that a slow disk holds the reading back.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from ...library import (
    Library,
    LibraryModel,
    ModelName,
    PullEvent,
    parse_name,
    pull_plan,
    split_peer,
)
from ...library.download import READ_TIMEOUT_S, RemoteFile
from ...library.sources import Plan
from ...protocol.errors import ErrorKind, InferError
from .client import P2PClient
from .discovery import find_hosts
from .ids import server_id as server_id_of

TOPIC = "topic:"  # peer:topic:NAME/MODEL: the first host on the topic that shares MODEL
SHARE_WAIT_S = 300.0  # a model folder's file is hashed before its manifest comes: ~1 GB/s
PULL_THREADS = 4
PIECES_HELD = 16  # pieces between the connection and the disk: 12 MiB
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")  # a file in a model's folder


class PeerPulls:
    """Pulls from other hosts, as this host (or client) is known to them: by `seed`'s key,
    which the serving host must list in its host.p2p.share (or --admin)."""

    def __init__(self, *, bootstrap: Sequence[str] = (), seed: bytes | None = None) -> None:
        self.bootstrap, self.seed = list(bootstrap), seed
        self._threads = ThreadPoolExecutor(PULL_THREADS, thread_name_prefix="peer-pull")

    async def pull(
        self,
        library: Library,
        text: str,
        *,
        progress: Callable[[PullEvent], None] = lambda event: None,
        cancel: threading.Event | None = None,
    ) -> LibraryModel:
        peer = split_peer(text)
        if peer is None:
            raise InferError(ErrorKind.INVALID_PARAMS, f"'{text}' names no peer's model")
        where, wanted = peer
        progress({"status": "pulling manifest"})
        server_id, client, manifest = await self._sharer(where, wanted)
        try:
            name, plan = _plan(server_id, manifest)
            if name.full != parse_name(wanted).full:  # filed under another name, it could
                raise InferError(  # take the place of a model this host serves
                    ErrorKind.BAD_MESSAGE,
                    f"asked for {wanted}, the host at {server_id[:12]}… offers {name.short}",
                )
            there = str(manifest["name"])  # as the serving host names it
            loop = asyncio.get_running_loop()

            def opener(remote: RemoteFile, offset: int) -> _PeerBody:
                return _PeerBody(client, there, remote.name, offset, loop)

            work = partial(pull_plan, library, name, plan, progress=progress, cancel=cancel,
                           opener=opener)  # fmt: skip
            return await loop.run_in_executor(self._threads, work)
        finally:
            await client.close()

    async def _sharer(self, where: str, name: str) -> tuple[str, P2PClient, dict[str, Any]]:
        """The host that shares `name` (by its server ID, or the first of a topic's hosts
        that does), connected, and its manifest of the model."""
        topic = where.removeprefix(TOPIC) if where.startswith(TOPIC) else None
        if topic is None:
            candidates = [where]
        else:
            found = await find_hosts(topic, bootstrap=self.bootstrap)
            me = server_id_of(self.seed) if self.seed else None
            candidates = [info.server_id for info in found if info.server_id not in (None, me)]
        refusals = []
        for candidate in candidates:
            client: P2PClient | None = None
            try:
                client = await P2PClient.connect(
                    candidate, bootstrap=self.bootstrap, seed=self.seed
                )
                manifest = await client.request("model_share", {"name": name}, wait_s=SHARE_WAIT_S)
                return candidate, client, manifest
            except BaseException as err:
                if client is not None:
                    await client.close()
                if topic is None or not isinstance(err, InferError):
                    raise
                refusals.append(f"{candidate[:12]}…: {err.message}")
        raise InferError(
            ErrorKind.MODEL_NOT_FOUND,
            f"no host on topic {topic} shares {name}"
            + (f" ({'; '.join(refusals)})" if refusals else " (no host answered there)"),
        )


def _plan(server_id: str, manifest: dict[str, Any]) -> tuple[ModelName, Plan]:
    """The serving host's manifest as a pull's plan, every name in it checked: a host could
    send a path for a file name."""
    name = parse_name(str(manifest.get("name", "")))
    files = []
    for entry in manifest.get("files") or []:
        file, size, sha = entry.get("name"), entry.get("size"), entry.get("sha256")
        if not isinstance(file, str) or not _FILE_NAME.match(file) or ".." in file:
            raise InferError(ErrorKind.BAD_MESSAGE, f"the host sent a bad file name: {file!r}")
        if not isinstance(size, int) or not isinstance(sha, str) or len(sha) != 64:
            raise InferError(ErrorKind.BAD_MESSAGE, f"the host sent no size or sha256 for {file}")
        files.append(RemoteFile(url=f"peer:{server_id}", name=file, sha256=sha, size=size))
    if not files:
        raise InferError(ErrorKind.BAD_MESSAGE, f"the host lists no files for {name.short}")
    layers = manifest.get("layers") if isinstance(manifest.get("layers"), dict) else {}
    return name, Plan(files, origin=f"peer:{server_id}/{name.short}", layers=layers or {})


class _PeerBody:
    """A file from a peer, from `offset`, as download.fetch reads a response: `readinto` on
    the pull's thread, fed by a task on the event loop."""

    def __init__(
        self, client: P2PClient, name: str, file: str, offset: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:  # fmt: skip
        self.status = 206 if offset else 200
        self.headers = {"Content-Range": f"bytes {offset}-*/*"} if offset else {}
        self._pieces: queue.Queue[bytes] = queue.Queue(PIECES_HELD)
        self._end: object | None = None  # _WHOLE, or the InferError that ended the feed
        self._room = asyncio.Event()  # set by the pull's thread as it takes a piece
        self._loop = loop
        self._rest = memoryview(b"")
        self._feeding: Future[None] = asyncio.run_coroutine_threadsafe(
            self._feed(client, name, file, offset), loop
        )

    async def _feed(self, client: P2PClient, name: str, file: str, offset: int) -> None:
        end: InferError | None = None
        try:
            async for piece in client.read(name, file, offset):
                while self._pieces.full():  # the disk is behind: hold the reading back
                    self._room.clear()
                    if self._pieces.full():
                        await self._room.wait()
                self._pieces.put_nowait(piece)
        except InferError as err:
            end = err
        except Exception as err:  # said to the pull, not left for its timeout
            end = InferError(ErrorKind.CONNECT_FAILED, f"the transfer failed: {err}")
        finally:  # always an end for readinto: it waits for nothing else
            self._end = end if end is not None else _WHOLE

    def readinto(self, buffer: bytearray) -> int:
        if not self._rest:
            piece = self._next()
            if piece is None:
                return 0
            self._rest = memoryview(piece)
        n = min(len(buffer), len(self._rest))
        buffer[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n

    def _next(self) -> bytes | None:
        """The next piece; None at the file's end. The feed's error, once its pieces are all
        read, is raised."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            try:
                piece = self._pieces.get(timeout=0.05)
            except queue.Empty:
                pass
            else:
                with contextlib.suppress(RuntimeError):  # (a loop that has closed)
                    self._loop.call_soon_threadsafe(self._room.set)
                return piece
            if self._end is _WHOLE and self._pieces.empty():
                return None
            if isinstance(self._end, InferError) and self._pieces.empty():
                raise self._end
            if time.monotonic() > deadline:
                raise InferError(
                    ErrorKind.CONNECT_FAILED, "the host stopped sending; pull again to resume"
                )

    def close(self) -> None:
        self._feeding.cancel()  # a pull that stops early stops the host's reading too


_WHOLE = object()  # the feed's end: every piece was read
