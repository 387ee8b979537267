"""Events from an engine's thread to the event loop, without a wake-up per step.

A wake-up (`loop.call_soon_threadsafe`: a write to the loop's self-pipe) costs the engine
thread 40-70 µs between two decodes at one stream, 5-8 % of a small model's step (the write,
the woken loop's thread scheduled beside it, the GIL it takes: bench/profile_one_stream.py).
So the loop is woken only when it is not looking already: after a wake-up it reads the
mailbox again every POLL_S for as long as it finds something there, and stops, to be woken
again, at the first look that finds it empty. A steady stream of steps costs no wake-up at
all, and an event waits at most POLL_S for the loop. The one wake-up left is a write through
`ctypes.PyDLL`, which keeps the GIL: the woken loop runs once the engine thread lets go of it
(in `llama_decode`), not in the middle of its work between two decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 0.001  # how long an event may wait while the loop looks by itself (a token's time)


def _wake_writer() -> Callable[[int], object]:
    """A one-byte write to a descriptor that keeps the GIL (os.write where libc's cannot be
    reached that way)."""
    try:
        write = ctypes.PyDLL(None).write
    except (OSError, AttributeError, TypeError):  # no process-wide symbols (Windows)
        return lambda fd: os.write(fd, b"\0")
    write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    write.restype = ctypes.c_ssize_t
    return lambda fd: write(fd, b"\0", 1)


_write_wake = _wake_writer()


class Mailbox(Generic[T]):
    """Items posted from any thread, handed to `deliver` on the event loop in the order
    posted, all those waiting in one call. `close` delivers what is left and stops."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[list[T]], None]):
        self._loop = loop
        self._deliver = deliver
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._polling = False  # the loop looks again by itself: no wake-up needed
        self._closed = False
        self._read_fd, self._write_fd = os.pipe()
        for fd in (self._read_fd, self._write_fd):
            os.set_blocking(fd, False)
        try:
            loop.add_reader(self._read_fd, self._drain)
            self._pipe = True
        except NotImplementedError:  # a loop without readers (Windows' proactor)
            self._pipe = False

    def post(self, item: T) -> None:
        """From any thread. Wakes the loop unless it looks by itself or a wake is on its way
        (an item is waiting already)."""
        with self._lock:
            if self._closed:
                log.debug("mailbox closed; dropping an item")
                return
            self._items.append(item)
            if self._polling or len(self._items) > 1:
                return
            if self._pipe:  # under the lock: close() cannot shut the descriptor meanwhile
                _write_wake(self._write_fd)
                return
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            log.debug("event loop closed; dropping what was posted")

    def _drain(self) -> None:
        if self._pipe:
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_fd, 4096)
        self._look()

    def _look(self) -> None:
        with self._lock:
            if self._closed:
                return
            items, self._items = self._items, []
            self._polling = bool(items)  # found some: more are likely, look again soon
        if items:
            self._loop.call_later(POLL_S, self._look)
            self._deliver(items)

    def close(self) -> None:
        """On the event loop: deliver what was posted, then take no more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            items, self._items = self._items, []
        if self._pipe:
            self._loop.remove_reader(self._read_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)
        if items:
            self._deliver(items)
