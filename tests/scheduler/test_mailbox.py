"""Issue 38 §1: an engine thread's events reach the event loop in order and whole, with one
wake-up for a steady stream of steps rather than one a step; what is posted before close is
delivered, what comes after is dropped."""

from __future__ import annotations

import asyncio
import threading
import time

from infertui.core.scheduler import mailbox
from infertui.core.scheduler.mailbox import Mailbox


async def test_a_steady_stream_of_steps_wakes_the_loop_once_and_arrives_in_order(
    monkeypatch,
) -> None:
    writes: list[int] = []
    real_write = mailbox._write_wake
    monkeypatch.setattr(mailbox, "_write_wake", lambda fd: (writes.append(fd), real_write(fd)))
    got: list[int] = []
    box: Mailbox[int] = Mailbox(asyncio.get_running_loop(), got.extend)

    def steps(first: int) -> None:  # an engine thread: a step every 0.2 ms
        for i in range(first, first + 200):
            box.post(i)
            time.sleep(0.0002)

    await asyncio.to_thread(steps, 0)
    while len(got) < 200:
        await asyncio.sleep(0.001)
    assert got == list(range(200))
    assert len(writes) <= 10  # the first, and again only where the loop saw nothing for 1 ms
    await asyncio.sleep(0.01)  # the loop has stopped looking by itself: the next post wakes it
    before = len(writes)
    threading.Thread(target=box.post, args=(200,)).start()
    while len(got) < 201:
        await asyncio.sleep(0.001)
    assert len(writes) == before + 1 and got[-1] == 200
    box.close()


async def test_close_delivers_what_was_posted_and_drops_what_comes_after() -> None:
    got: list[str] = []
    box: Mailbox[str] = Mailbox(asyncio.get_running_loop(), got.extend)
    thread = threading.Thread(target=lambda: [box.post("a"), box.post("b")])
    thread.start()
    thread.join()
    box.close()  # before the loop had a turn to read them
    assert got == ["a", "b"]
    box.post("late")
    await asyncio.sleep(0.01)
    assert got == ["a", "b"]
