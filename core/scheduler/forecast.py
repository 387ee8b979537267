"""When waiting jobs will start: a small simulation over the engine's slots (issue 12 §9).

A slot frees when its job has produced the tokens it is expected to; each waiting job, in
order, takes the slot that frees first and holds it for its own expected time. A job is
expected to run to its max_tokens, or to the length most recent replies stayed within when
that is shorter: so a hint neither promises a slot that a long job still holds nor waits out
a budget that replies never use. Rates are what the engine measured lately, at the batch size
it runs now, so the forecast holds on a 2-core laptop and on an H100 alike.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .job import Job
from .metrics import MetricsRecorder

FALLBACK_DECODE_TPS = 10.0  # per sequence, before anything was measured: on the slow side
# What a prompt token costs in fair shares, in generated tokens: a prefill runs a step's
# tokens in one batch, 5-10x the rate of decode per token on a CPU and on a GPU alike.
PROMPT_TOKEN_COST = 0.125


@dataclass(frozen=True)
class Rates:
    decode_tps: float  # tokens per second per sequence, at the current batch size
    prefill_tps: float | None  # prompt tokens per second; None: not measured, not counted
    typical_tokens_out: int | None  # most replies end within this many tokens; None: unknown

    def expected_tokens(self, max_tokens: int, generated: int = 0) -> int:
        """Tokens a job with this budget has left to produce, having produced `generated`.
        One already past the typical length is expected to run as long again (capped)."""
        left = max_tokens - generated
        typical = self.typical_tokens_out
        if typical is None:
            return max(left, 0)
        return max(min(left, typical - generated if generated < typical else typical), 0)

    def cost(self, max_tokens: int, prompt_tokens: int) -> float:
        """The tokens a waiting job is expected to cost its identity (fair shares)."""
        return self.expected_tokens(max_tokens) + prompt_tokens * PROMPT_TOKEN_COST

    def service_s(self, max_tokens: int, prompt_tokens: int) -> float:
        """Seconds a waiting job will hold its slot: its prefill, then its expected reply."""
        prefill = prompt_tokens / self.prefill_tps if self.prefill_tps else 0.0
        return prefill + self.expected_tokens(max_tokens) / self.decode_tps


def start_times(
    busy_for_s: Iterable[float], free_slots: int, waiting_s: Sequence[float]
) -> list[float]:
    """Seconds from now until each waiting job starts, and last, until a job that joins the
    back of the queue now would: `busy_for_s` is how long each busy slot stays busy,
    `waiting_s` how long each waiting job (in queue order) will hold the slot it gets."""
    frees = [0.0] * free_slots + list(busy_for_s)
    if not frees:
        return [0.0] * (len(waiting_s) + 1)
    heapq.heapify(frees)
    starts = []
    for service in waiting_s:
        start = heapq.heappop(frees)
        starts.append(start)
        heapq.heappush(frees, start + service)
    starts.append(frees[0])
    return starts


def forecast(
    running: Sequence[Job], waiting: Sequence[Job], n_slots: int, metrics: MetricsRecorder
) -> list[float]:
    """Seconds until each waiting job starts, in queue order, and last, until a job that
    joins now would, at the rates the pool measured."""
    rates = rates_of(metrics, len(running))
    busy_for = [
        rates.expected_tokens(job.request.max_tokens, job.tokens_out) / rates.decode_tps
        for job in running
    ]
    services = [
        rates.service_s(job.request.max_tokens, len(job.request.prompt_tokens)) for job in waiting
    ]
    return start_times(busy_for, max(0, n_slots - len(busy_for)), services)


def rates_of(metrics: MetricsRecorder, running: int) -> Rates:
    """The rates the pool measured, with `running` jobs decoding."""
    return Rates(
        decode_tps=decode_tps_per_sequence(metrics, running),
        prefill_tps=metrics.prefill_rate(),
        typical_tokens_out=metrics.typical_tokens_out(),
    )


def expected_cost(metrics: MetricsRecorder, max_tokens: int, prompt_tokens: int) -> float:
    """What a job about to queue is expected to cost its identity (fair shares)."""
    return Rates(FALLBACK_DECODE_TPS, None, metrics.typical_tokens_out()).cost(
        max_tokens, prompt_tokens
    )


def spent_cost(tokens_in: int, tokens_out: int) -> float:
    """What a job that ended really cost its identity, in the units of Rates.cost."""
    return tokens_out + tokens_in * PROMPT_TOKEN_COST


def decode_tps_per_sequence(metrics: MetricsRecorder, running: int) -> float:
    """What one sequence gets at the batch size now: the rate of the latest steady run over
    all slots shared out, else the last job's own rate, else a slow guess."""
    total = metrics.active_decode_rate()
    if total and running:
        return total / running
    return metrics.last_job_tps or FALLBACK_DECODE_TPS
