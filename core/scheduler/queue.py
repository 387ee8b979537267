"""JobQueue: a pool's one queue, the admitted jobs that wait to start, in a fair order.

Jobs wait in lines, one per engine and kind (a generation needs a slot, an embedding only
room in the engine's embedding batch), so that a line whose engine is full never holds up
another: while a reload switches engines, a job keeps to the engine that tokenized its
prompt.

Within a line, a free slot goes to interactive work before batch work, and within a class to
the identity that has had the least service for its weight: start-time fair queueing (Goyal,
Vin and Cheng, 1996) over tokens. Each identity's jobs keep their arrival order (a flow). A
job that starts moves the line's virtual clock to its start tag, and its identity's finish tag
to that start plus its expected cost over the identity's weight; a flow's next job starts at
the later of the clock and that finish. So a newcomer starts at the clock, ahead of another's
backlog, which never pushes its first job back more than one slot's turnover; an identity
that was idle banks no credit; one alone gets every slot. When a job ends, its identity's tag
is set right by what it really cost.

Positions are that order over every waiting job, so the forecast follows it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator

from ..engine import Engine
from .job import Job

Line = tuple[Engine, bool]  # (the engine a job waits for, whether it embeds)
Flow = tuple[str, bool]  # (identity, batch): one identity's jobs of one class, in arrival order
Room = Callable[[Engine, bool, bool], bool]  # (engine, embeds, batch): one more may start now


class _Line:
    __slots__ = ("clock", "finish", "flows", "running")

    def __init__(self) -> None:
        self.clock = 0.0  # the start tag of the latest job started
        self.finish: dict[str, float] = {}  # each identity's finish tag
        self.flows: dict[Flow, deque[Job]] = {}
        self.running = 0  # its jobs started and not ended: their tags still count

    def start_tag(self, identity: str) -> float:
        return max(self.clock, self.finish.get(identity, 0.0))


class JobQueue:
    def __init__(self, weight: Callable[[str], float] = lambda identity: 1.0) -> None:
        self._weight = weight
        self._lines: dict[Line, _Line] = {}
        self._size = 0
        self._arrivals = itertools.count()
        self._charged: dict[Job, float] = {}  # a started job: the weight its cost was charged at
        self._order: list[Job] | None = None  # the waiting jobs in the order they will start
        self._index: dict[Job, int] | None = None

    def __len__(self) -> int:
        return self._size

    def push(self, job: Job) -> None:
        """Queue a job; `job.expected_cost` (tokens) is what its start will be charged."""
        job.arrival = next(self._arrivals)
        line = self._lines.setdefault(_line_of(job), _Line())
        line.flows.setdefault((job.identity, job.batch), deque()).append(job)
        self._size += 1
        self._changed()

    def waits_for(self, engine: Engine, embeds: bool) -> bool:
        """Whether any job waits in that line."""
        line = self._lines.get((engine, embeds))
        return bool(line and line.flows)

    def remove(self, job: Job) -> bool:
        """Take a job out before it started; False if it is not waiting."""
        line = self._lines.get(_line_of(job))
        flow = line.flows.get((job.identity, job.batch)) if line else None
        if line is None or flow is None or job not in flow:
            return False
        flow.remove(job)
        if not flow:
            del line.flows[job.identity, job.batch]
        self._size -= 1
        self._changed()
        self._forget_if_idle(_line_of(job))
        return True

    def take(self, room: Room, may_start: Callable[[str], bool]) -> Iterator[Job]:
        """The jobs that can start now, taken out in fair order: for as long as `room` says
        a line's engine has room for a class, the head of the flow with the least start tag
        whose identity `may_start` one more."""
        for (engine, embeds), line in list(self._lines.items()):
            while line.flows:
                best: tuple[bool, float, int, Flow] | None = None
                for flow, jobs in line.flows.items():
                    identity, batch = flow
                    if not room(engine, embeds, batch) or not may_start(identity):
                        continue
                    key = (batch, line.start_tag(identity), jobs[0].arrival, flow)
                    if best is None or key < best:
                        best = key
                if best is None:
                    break
                flow, start = best[3], best[1]
                jobs = line.flows[flow]
                job = jobs.popleft()
                if not jobs:
                    del line.flows[flow]
                weight = self._weight(job.identity)
                line.clock = max(line.clock, start)
                line.finish[job.identity] = start + job.expected_cost / weight
                line.running += 1
                self._charged[job] = weight
                self._size -= 1
                self._changed()
                yield job

    def settle(self, job: Job, cost: float) -> None:
        """A started job ended having cost `cost` tokens: its identity's tag is set right."""
        weight = self._charged.pop(job, None)
        line = self._lines.get(_line_of(job))
        if weight is None or line is None:
            return
        line.running -= 1
        if job.identity in line.finish:
            line.finish[job.identity] += (cost - job.expected_cost) / weight
        self._changed()
        self._forget_if_idle(_line_of(job))

    def _forget_if_idle(self, key: Line) -> None:
        """A line with nothing waiting or running owes no one anything: dropped, and with it
        the engine it holds (a reload's old one)."""
        line = self._lines.get(key)
        if line is not None and not line.flows and not line.running:
            del self._lines[key]

    def drain(self) -> list[Job]:
        """Every waiting job, in queue order, taken out."""
        jobs = self.jobs()
        for key, line in list(self._lines.items()):
            line.flows.clear()
            self._forget_if_idle(key)
        self._size = 0
        self._changed()
        return jobs

    def jobs(self) -> list[Job]:
        """The waiting jobs in the order they will start: index = queue position. Each
        flow's jobs take their start tags one after the other from the flow's next one."""
        if self._order is None:
            keyed: list[tuple[bool, float, int, Job]] = []
            for line in self._lines.values():
                for (identity, batch), flow in line.flows.items():
                    tag, weight = line.start_tag(identity), self._weight(identity)
                    for job in flow:
                        keyed.append((batch, tag, job.arrival, job))
                        tag += job.expected_cost / weight
            keyed.sort(key=lambda entry: entry[:3])
            self._order = [entry[3] for entry in keyed]
        return self._order

    def position(self, job: Job) -> int | None:
        """Where a job stands (0: next), or None if it is not waiting."""
        if self._index is None:
            self._index = {waiting: i for i, waiting in enumerate(self.jobs())}
        return self._index.get(job)

    def _changed(self) -> None:
        self._order = self._index = None


def _line_of(job: Job) -> Line:
    return job.engine, job.request.embed
