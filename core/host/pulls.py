"""The host's pulls: each runs on a thread of its own (library/pull.py), one per model name,
and every request for that name follows the one pull's progress; a host that stops cancels
them, leaving their partial files to resume from. A `peer:<server-id>/<name>` comes from
another host over Hyperswarm, by the PeerSource the host is given (transport/p2p/peer_pull.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from ..library import Library, LibraryModel, PullEvent, parse_name, pull, split_peer
from ..protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)

PULL_THREADS = 4  # pulls at once; more wait for one to end
STOP_WAIT_S = 5.0


@dataclass
class _Pull:
    followers: list[asyncio.Queue[PullEvent | None]] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)
    last: PullEvent | None = None  # what a follower that joins late sees first
    error: InferError | None = None
    model: LibraryModel | None = None

    def publish(self, event: PullEvent | None) -> None:
        if event is not None:
            self.last = event
        for queue in self.followers:
            queue.put_nowait(event)


class PeerSource(Protocol):
    async def pull(
        self, library: Library, text: str, *, progress: Callable[[PullEvent], None],
        cancel: threading.Event | None = None,
    ) -> LibraryModel: ...  # fmt: skip


class Pulls:
    def __init__(self, library: Library) -> None:
        self._library = library
        self.peers: PeerSource | None = None  # given where Hyperswarm is on
        # threads of their own: a pull holds one for minutes, which the default executor's
        # few (cores + 4) lend to every short to_thread call of the host
        self._threads = ThreadPoolExecutor(PULL_THREADS, thread_name_prefix="pull")
        self._running: dict[str, _Pull] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def follow(self, text: str, *, insecure: bool = False) -> AsyncIterator[PullEvent]:
        """The progress of the pull of `text` (started now, or already running), to its
        `success`; a failure is raised after the events before it."""
        # INVALID_PARAMS before anything starts; a peer's model is named once it answers
        key = text if split_peer(text) else parse_name(text).full
        running = self._running.get(key)
        if running is None:
            running = self._running[key] = _Pull()
            task = asyncio.create_task(self._run(key, text, insecure, running), name="pull")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        queue: asyncio.Queue[PullEvent | None] = asyncio.Queue()
        if running.last is not None:
            queue.put_nowait(running.last)
        running.followers.append(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            running.followers.remove(queue)
        if running.error is not None:
            raise running.error

    async def _run(self, key: str, text: str, insecure: bool, running: _Pull) -> None:
        loop = asyncio.get_running_loop()

        def said(event: PullEvent) -> None:  # on the pull's thread
            loop.call_soon_threadsafe(running.publish, event)

        try:
            if split_peer(text):
                running.model = await self._from_peer(text, said, running.cancel)
            else:
                work = partial(pull, self._library, text, insecure=insecure, progress=said,
                               cancel=running.cancel)  # fmt: skip
                running.model = await loop.run_in_executor(self._threads, work)
            log.info("pulled %s into the library", running.model.name)
        except InferError as err:
            running.error = err
            log.warning("pull of %s failed: %s", text, err.message)
        except Exception as exc:  # a bug must not leave followers waiting for ever
            log.exception("pull of %s failed", text)
            running.error = InferError(ErrorKind.INTERNAL, f"the pull failed: {exc}")
        finally:
            del self._running[key]
            running.publish(None)

    async def _from_peer(
        self, text: str, said: Callable[[PullEvent], None], cancel: threading.Event
    ) -> LibraryModel:
        if self.peers is None:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                "this host pulls from other hosts over Hyperswarm, which is off here (--no-p2p)",
            )
        return await self.peers.pull(self._library, text, progress=said, cancel=cancel)

    async def cancel_all(self) -> None:
        """Stop every pull (each stops at its next MiB); one still waiting on a peer after
        a few seconds is cancelled where it waits."""
        for running in self._running.values():
            running.cancel.set()
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=STOP_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._threads.shutdown(wait=False)
