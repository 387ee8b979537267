"""A pool's control plane: its engine loaded, reloaded beside the old one and switched
atomically (OC-CTRL-2003), drained to a deadline (OC-CTRL-2002), resumed, closed; and an
upstream's health turning the pool unready and back. Pool (pool.py) is the rest: admission,
the one queue, and the engine's events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import TYPE_CHECKING

from ..engine import AnySpec, Engine, open_engine
from ..engine.types import Events
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Finished
from ..protocol.snapshots import PoolState, TimingStats
from .job import Job
from .mailbox import Mailbox
from .queue import JobQueue

log = logging.getLogger("infertui.core.scheduler.pool")  # one logger for the pool's lines


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


class PoolControl:
    """The control plane of a Pool, which holds the state it works on."""

    id: str
    spec: AnySpec
    state: PoolState
    engine: Engine | None
    error: str | None
    _jobs: dict[str, Job]
    _queue: JobQueue
    _started: Counter[tuple[Engine, bool]]
    _batch_started: Counter[Engine]
    _retiring: set[Engine]
    _closing: set[asyncio.Task[None]]
    _unreachable: bool
    _idle: asyncio.Event
    _deadline_now: asyncio.Event
    _loop: asyncio.AbstractEventLoop
    _mailbox: Mailbox[Events]

    if TYPE_CHECKING:  # Pool's own, which this plane calls

        def _publish(self, batch: Events) -> None: ...
        def _why_unready(self) -> str: ...

    async def load(self) -> None:
        """Load the model (in a worker thread) or connect to the upstream. On failure the pool
        is FAILED and raises; an upstream that does not answer yet leaves it unready instead."""
        self.state = PoolState.LOADING
        try:
            self.engine = await self._open(self.spec)
        except InferError as exc:
            self.state, self.error = PoolState.FAILED, exc.message
            raise
        self.state, self.error = PoolState.READY, None
        if self.engine.problem is not None:  # an upstream that is not up yet
            self._on_health(self.engine.problem)

    async def _open(self, spec: AnySpec) -> Engine:
        """Start an engine whose reachability reports count while it is the pool's own (a
        reloaded-away one may still report until it shuts down)."""
        opened: list[Engine] = []

        def on_health(problem: str | None) -> None:
            if opened and opened[0] is self.engine:
                self._on_health(problem)

        engine = await open_engine(spec, self._publish, on_health)
        opened.append(engine)
        return engine

    def _on_health(self, problem: str | None) -> None:
        """The engine's upstream stopped answering (why), or answers again (None). Only a
        pool that admits work turns unready and back: a drained one stays drained, and
        resumes as what its upstream is then."""
        was, self._unreachable = self._unreachable, problem is not None
        if problem is not None:
            self.error = problem
            if self.state is PoolState.READY:
                self.state = PoolState.FAILED
                log.warning("pool %s unready: %s", self.id, problem)
            # no client waits on a server that is gone: the queue ends as its jobs would
            error = InferError(ErrorKind.POOL_UNREADY, problem, engine_id=self.id,
                               retry_after_ms=1000)  # fmt: skip
            for job in self._queue.drain():
                job._deliver(Finished("error", TimingStats(tokens_in=job.tokens_in), error))
        elif was:
            self.error = None
            if self.state is PoolState.FAILED:
                self.state = PoolState.READY
                log.info("pool %s ready again", self.id)

    async def drain(self, deadline_ms: int) -> dict[str, int]:
        """Stop admitting; let jobs finish until the deadline; cancel the rest (OC-CTRL-2002)."""
        if self.state is PoolState.READY or self._unreachable:
            self.state = PoolState.DRAINING
        log.info(
            "pool %s draining (deadline %d ms, %s)", self.id, deadline_ms, _jobs(len(self._jobs))
        )
        waits = [asyncio.ensure_future(e.wait()) for e in (self._idle, self._deadline_now)]
        try:  # until the jobs are done, the deadline, or end_drains_now()
            await asyncio.wait(
                waits, timeout=deadline_ms / 1000, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for wait in waits:
                wait.cancel()
        late = [job for job in self._jobs.values() if not job.done]
        for job in late:
            job.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 10)
        self.state = PoolState.DRAINED
        log.info("pool %s drained (%d cancelled at the deadline)", self.id, len(late))
        return {"cancelled": len(late)}

    def end_drains_now(self) -> None:
        """Bring a drain's deadline forward to now, this one's and any to come: its jobs are
        cancelled at once (a second Ctrl-C while the host stops). `resume` takes it back."""
        self._deadline_now.set()

    def resume(self) -> None:
        """Admit again after a drain (a no-op when already admitting). A drain still running
        must finish first: its deadline would cancel the jobs admitted meanwhile."""
        if self.state is PoolState.READY:
            return
        if self.state is not PoolState.DRAINED or self.engine is None:
            closed = self.state is PoolState.DRAINED  # drained with no engine: closed
            why = f"engine '{self.id}' is closed" if closed else self._why_unready()
            raise InferError(ErrorKind.POOL_UNREADY, f"{why}; only a drained engine can resume")
        self.state = PoolState.FAILED if self._unreachable else PoolState.READY
        self._deadline_now.clear()
        log.info("pool %s resumed", self.id)

    async def reload(self, model_path: str | None = None) -> None:
        """Load the new model beside the old, then switch atomically (OC-CTRL-2003). If the new
        one fails to load, the old one keeps serving and the error is raised."""
        spec = self.spec if model_path is None else self.spec.with_model(model_path)
        log.info("pool %s reloading %s", self.id, spec.model_path)
        try:
            new = await self._open(spec)
        except InferError as exc:
            self.error = f"reload failed, kept the previous model: {exc.message}"
            log.warning("pool %s: %s", self.id, self.error)
            raise
        old, self.engine, self.spec = self.engine, new, spec
        self.error, self._unreachable = None, False
        if self.state in (PoolState.DRAINED, PoolState.FAILED):
            self.state = PoolState.READY
        if new.problem is not None:
            self._on_health(new.problem)
        if old is not None:
            self._retiring.add(old)  # its running and queued jobs finish on it
            self._retire_idle_engines()

    def _retire_idle_engines(self) -> None:
        for engine in list(self._retiring):
            if not any(job.engine is engine for job in self._jobs.values()):
                self._retiring.discard(engine)
                for kind in (False, True):
                    self._started.pop((engine, kind), None)
                self._batch_started.pop(engine, None)
                task = self._loop.create_task(engine.shutdown())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Cancel everything and free the engine(s)."""
        self.state = PoolState.DRAINED
        for job in list(self._jobs.values()):
            job.cancel()
        engines = [e for e in (self.engine, *self._retiring) if e is not None]
        self.engine, self._retiring = None, set()
        for engine in engines:
            await engine.shutdown()
        await asyncio.gather(*self._closing, return_exceptions=True)
        self._mailbox.close()  # the engines' last events, then no more
