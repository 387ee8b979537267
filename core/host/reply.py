"""A job's reply in no dialect, which every face frames in its own wire format: its text as it
comes (with logprobs where asked), the calls of tools it makes as deltas (read by the one
reader of calls, tool_stream.py, through HeldReply), and one `End`.

A reply that may call tools is held back while it may yet be calls; one with no tools offered
passes each piece on as the job gave it (the hot path: no copy, no scan).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ..protocol.events import Finished, TokenText
from ..protocol.tool_stream import CallDelta
from ..protocol.tool_use import HeldReply, ToolUse
from ..scheduler import Job


@dataclass(frozen=True, slots=True)
class End:
    """How a reply ended: the job's last event (its reason, figures and failure), and whether
    the reply was calls of tools."""

    final: Finished
    called: bool = False


Piece = TokenText | CallDelta | End


async def reply(job: Job, tools: ToolUse | None = None) -> AsyncIterator[Piece]:
    """The job's reply, ending with one End; a reply that may call `tools` gives its calls
    as CallDelta and its text only once it cannot be calls."""
    held = HeldReply(tools) if tools is not None and tools.names else None
    async for event in job.events():
        if isinstance(event, TokenText):
            if held is None:
                yield event
                continue
            calls, pieces = held.add(event)
            for call in calls:
                yield call
            if pieces:
                yield joined(pieces)
        elif isinstance(event, Finished):
            called = False
            if held is not None and event.whole:
                pieces, called = held.finish()
                if pieces:
                    yield joined(pieces)
            yield End(event, called)
            return


def joined(pieces: Sequence[TokenText]) -> TokenText:
    """Pieces of text held back, as one."""
    if len(pieces) == 1:
        return pieces[0]
    last = pieces[-1]
    text = "".join(piece.text for piece in pieces)
    logprobs = tuple(lp for piece in pieces for lp in piece.logprobs)
    return TokenText(text, last.index, last.n_tokens, logprobs)


async def replies(
    jobs: Sequence[Job], tools: ToolUse | None = None
) -> AsyncIterator[tuple[int, Piece]]:
    """The replies of several jobs (a request's choices) as they come, tagged with the job's
    index. Leaving early cancels the jobs still running."""
    if len(jobs) == 1:
        async for piece in reply(jobs[0], tools):
            yield 0, piece
        return
    queue: asyncio.Queue[tuple[int, Piece]] = asyncio.Queue()

    async def pump(index: int, job: Job) -> None:
        async for piece in reply(job, tools):
            queue.put_nowait((index, piece))

    tasks = [asyncio.create_task(pump(i, job)) for i, job in enumerate(jobs)]
    remaining = len(jobs)
    try:
        while remaining:
            index, piece = await queue.get()
            yield index, piece
            if isinstance(piece, End):
                remaining -= 1
    finally:
        for task in tasks:
            task.cancel()
