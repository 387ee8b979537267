"""JobQueue: a pool's one queue, the admitted jobs that wait to start.

Jobs wait in lines, one per engine and kind (a generation needs a slot, an embedding only
room in the engine's embedding batch), so that a line whose engine is full never holds up
another: while a reload switches engines, a job keeps to the engine that tokenized its
prompt. Within a line, first come first served. Positions count every waiting job, in the
order they came.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from ..engine import Engine
from .job import Job

Line = tuple[Engine, bool]  # (the engine a job waits for, whether it embeds)


class JobQueue:
    def __init__(self) -> None:
        self._lines: dict[Line, deque[Job]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, job: Job) -> None:
        self._lines.setdefault(_line_of(job), deque()).append(job)
        self._size += 1

    def waits_for(self, engine: Engine, embeds: bool) -> bool:
        """Whether any job waits in that line."""
        return bool(self._lines.get((engine, embeds)))

    def remove(self, job: Job) -> bool:
        """Take a job out before it started; False if it is not waiting."""
        line = self._lines.get(_line_of(job))
        if line is None or job not in line:
            return False
        line.remove(job)
        self._size -= 1
        return True

    def take(self, room: Callable[[Engine, bool], bool]) -> Iterator[Job]:
        """The jobs that can start now, taken out in order: each line's head, for as long as
        `room(engine, embeds)` says its engine has room."""
        for line_key, line in list(self._lines.items()):
            while line and room(*line_key):
                self._size -= 1
                yield line.popleft()
            if not line:
                del self._lines[line_key]

    def drain(self) -> list[Job]:
        """Every waiting job, in arrival order, taken out."""
        jobs = self.jobs()
        self._lines.clear()
        self._size = 0
        return jobs

    def jobs(self) -> list[Job]:
        """The waiting jobs in arrival order: index = queue position."""
        if len(self._lines) == 1:
            return list(next(iter(self._lines.values())))
        return sorted((job for line in self._lines.values() for job in line),
                      key=lambda job: job.enqueued_at)  # fmt: skip

    def position(self, job: Job) -> int | None:
        """Where a job stands (0: next), or None if it is not waiting."""
        line = self._lines.get(_line_of(job))
        if line is None or job not in line:
            return None
        if len(self._lines) == 1:
            return line.index(job)
        return self.jobs().index(job)


def _line_of(job: Job) -> Line:
    return job.engine, job.request.embed
