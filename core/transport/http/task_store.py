"""Accepted tasks (spec 002) and what each reader of their streams sees.

A task runs whether anyone reads it or not, and only POST .../cancel stops it. Its events
go into a transcript as they come; every reader replays the transcript from the start and
then follows it, so two readers both get every token, a reader that leaves cancels nothing,
and a finished task streams again in full. Once a task ends, its job (prompt tokens,
sampling, stop strings) is let go: the transcript and the final event are all it keeps, for
FORGET_AFTER_S, and then it is forgotten.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from ...host import HostService
from ...protocol.errors import ErrorKind, InferError
from ...protocol.events import Admitted, Finished, TokenText
from ...scheduler import Job

FORGET_AFTER_S = 300


class Task:
    """One accepted task: its job while it runs, and the transcript of its events."""

    def __init__(self, job: Job, owner: str | None = None) -> None:
        self.id = job.id
        self.owner = owner  # the API key it came with (access.py): who may read or cancel it
        self.pool_id = job.pool_id
        self.identity, self.session_id = job.identity, job.session_id  # for its session's budget
        self.job: Job | None = job  # None once it has ended
        self.admitted: Admitted | None = None
        self.pieces: list[str] = []
        self.tokens_out = 0
        self._emitted = 0  # text events the job published, once it has ended
        self.final: Finished | None = None
        self.ended_at: float | None = None
        self._changed = asyncio.Event()
        self._pump = asyncio.create_task(self._record(job))

    @property
    def state(self) -> str:
        return self.job.state.value if self.job is not None else "done"

    def cancel(self) -> bool:
        """Cancel the job if it still runs (race-free: no token follows); False if over."""
        return self.job.cancel() if self.job is not None else False

    @property
    def tokens_emitted(self) -> int:
        """Text events published: all of them reach every reader, none follows a cancel."""
        return self.job.tokens_published if self.job is not None else self._emitted

    def position(self, service: HostService) -> tuple[int, int]:
        return service.position(self.job) if self.job is not None else (0, 0)

    async def follow(self) -> AsyncIterator[Admitted | TokenText | Finished]:
        """The task's events from its start, then as they come, up to the Finished one."""
        index, told_admitted = 0, False
        while True:
            changed = self._changed
            if self.admitted is not None and not told_admitted:
                told_admitted = True
                yield self.admitted
            while index < len(self.pieces):
                yield TokenText(self.pieces[index], index, self.tokens_out)
                index += 1
            if self.final is not None:
                yield self.final
                return
            await changed.wait()

    async def _record(self, job: Job) -> None:
        try:
            async for event in job.events():
                if isinstance(event, TokenText):
                    self.pieces.append(event.text)
                    self.tokens_out = event.n_tokens
                elif isinstance(event, Admitted):
                    self.admitted = event
                else:
                    self.final = event
                self._wake()
        finally:
            self._emitted = job.tokens_published
            self.job, self.ended_at = None, time.perf_counter()
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class TaskStore:
    """Accepted tasks by id, until a while after they end."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def check_new(self, task_id: str | None) -> None:
        """A task id may be chosen by the client once: a known one is a 409."""
        self._sweep()
        if task_id is not None and task_id in self._tasks:
            raise InferError(
                ErrorKind.CONFLICT, f"task '{task_id}' exists already", param="task_id"
            )

    def add(self, job: Job, owner: str | None = None) -> Task:
        """The task of a job just admitted; a 409 (and the job cancelled) where a task of
        that id was admitted meanwhile, while this one's prompt was tokenized off the loop."""
        if job.id in self._tasks:
            job.cancel()
            self.check_new(job.id)
        task = self._tasks[job.id] = Task(job, owner)
        return task

    def get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise InferError(ErrorKind.NOT_FOUND, f"no task '{task_id}'", param="task_id") from None

    def _sweep(self) -> None:
        now = time.perf_counter()
        for task_id, task in list(self._tasks.items()):
            if task.ended_at is not None and now - task.ended_at > FORGET_AFTER_S:
                del self._tasks[task_id]
