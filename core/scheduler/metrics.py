"""MetricsRecorder: counts and timings of one pool, turned into immutable MetricsSnapshots.

Recorded on the event loop as jobs are admitted, stream and finish; percentiles are taken
over a window of recent jobs, rates over a recent time window and over the pool's lifetime.
"""

from __future__ import annotations

import time
from collections import Counter, deque

from ..protocol.events import Finished
from ..protocol.snapshots import MemoryUsage, MetricsSnapshot, Percentiles

_RECENT_JOBS = 512
_RATE_WINDOW_S = 10.0
_LULL_S = 1.0  # a pause this long between steps ends a run of decoding
_MIN_RUN_S = 1.0  # a rate from less than this much decoding misleads more than it tells


# Histogram bucket bounds in milliseconds (Prometheus exposes them in seconds).
BUCKETS_MS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000)
TOKEN_BUCKETS_MS = (1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280)  # time per output token


class Histogram:
    """Cumulative-ready bucket counts, as Prometheus histograms expose them."""

    def __init__(self, buckets_ms: tuple[float, ...] = BUCKETS_MS) -> None:
        self.buckets_ms = buckets_ms
        self.counts = [0] * (len(buckets_ms) + 1)  # the last bucket is +Inf
        self.sum_ms = 0.0
        self.count = 0

    def observe(self, value_ms: float) -> None:
        bounds = self.buckets_ms
        index = next((i for i, bound in enumerate(bounds) if value_ms <= bound), len(bounds))
        self.counts[index] += 1
        self.sum_ms += value_ms
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound in seconds, observations at or below it), ending with +Inf."""
        out, total = [], 0
        for bound, n in zip(
            [*(str(b / 1000) for b in self.buckets_ms), "+Inf"], self.counts, strict=True
        ):
            total += n
            out.append((bound, total))
        return out


def percentiles(values: list[float]) -> Percentiles:
    if not values:
        return Percentiles()
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return Percentiles(p50=at(0.50), p95=at(0.95), p99=at(0.99))


class MetricsRecorder:
    """Mutable counters behind a pool's MetricsSnapshot."""

    def __init__(self, pool_id: str) -> None:
        self.pool_id = pool_id
        self.accepted = 0
        self.rejected = 0
        self.completed = 0
        self.cancelled = 0
        self.failed = 0
        self.tokens_in = 0
        self.tokens_read = 0  # prompt tokens read (not copied from kept cells), timed...
        self.tokens_out = 0
        self.decode_s = 0.0
        self.prefill_s = 0.0  # ...in this time: the prefills `record_prefill` was given
        self.errors: Counter[str] = Counter()
        self.ttft_hist = Histogram()
        self.latency_hist = Histogram()
        self.queue_hist = Histogram()  # enqueued to admitted
        self.prefill_hist = Histogram()  # admitted to the prompt decoded
        self.tpot_hist = Histogram(TOKEN_BUCKETS_MS)  # between output tokens, per request
        self._ttft: deque[float] = deque(maxlen=_RECENT_JOBS)
        self._latency: deque[float] = deque(maxlen=_RECENT_JOBS)
        self._replies: deque[int] = deque(maxlen=64)  # tokens out of recent whole replies
        self._token_times: deque[tuple[float, int]] = deque()
        self._prefills: deque[tuple[float, int, float]] = deque(maxlen=_RECENT_JOBS)
        self.last_job_tps = 0.0

    def record_accept(self) -> None:
        self.accepted += 1

    def record_reject(self, kind: str) -> None:
        self.rejected += 1
        self.errors[kind] += 1

    def record_tokens(self, n: int) -> None:
        self._token_times.append((time.monotonic(), n))

    def record_prefill(self, tokens: int, seconds: float) -> None:
        """A prompt read, as the job's first text comes: the recent prompt rate moves then,
        and the lifetime one. A job cancelled before that has no prefill to count."""
        if tokens > 0 and seconds > 0:
            self._prefills.append((time.monotonic(), tokens, seconds))
            self.tokens_read += tokens
            self.prefill_s += seconds

    def record_first_token(self, ttft_ms: float) -> None:
        """A job's first token reached the event loop: its TTFT counts now, not when the job
        ends (a long reply kept the dashboards' TTFT blank for as long as it ran; vLLM's
        histogram is observed at the first token too). Whatever the job's end."""
        self._ttft.append(ttft_ms)
        self.ttft_hist.observe(ttft_ms)

    def record_finish(
        self, final: Finished, *, prefill_recorded: bool = False, ttft_recorded: bool = False
    ) -> None:
        """A job's end; its prompt counts now unless `record_prefill` had it already (an
        upstream's prompt size is known only from the usage at the end), and its TTFT unless
        `record_first_token` had it (a whole reply with no text: the engine's own figure)."""
        t = final.timings
        reason = final.finish_reason
        if reason == "abort":
            self.cancelled += 1
        elif reason == "error":
            self.failed += 1
            self.errors[final.error.kind.value if final.error else "INTERNAL"] += 1
        else:
            self.completed += 1
        self.tokens_in += t.tokens_in
        self.tokens_out += t.tokens_out
        self.decode_s += t.decode_ms / 1000
        if reason in ("stop", "length"):
            if not ttft_recorded and t.ttft_ms is not None:
                self.record_first_token(t.ttft_ms)
            self._latency.append(t.total_ms)
            self.latency_hist.observe(t.total_ms)
            self.queue_hist.observe(t.queue_wait_ms)
            self.prefill_hist.observe(t.prefill_ms)
            if t.tokens_out > 1:
                self.tpot_hist.observe(t.decode_ms / (t.tokens_out - 1))
            self._replies.append(t.tokens_out)
            if t.decode_tps:
                self.last_job_tps = t.decode_tps
        if not prefill_recorded:
            self.record_prefill(t.tokens_in - t.tokens_cached, t.prefill_ms / 1000)

    def histograms(self) -> dict[str, Histogram]:
        """Every histogram, by the name its Prometheus metric takes (vLLM's where it has one)."""
        return {
            "ttft": self.ttft_hist,
            "request_latency": self.latency_hist,
            "request_queue_time": self.queue_hist,
            "request_prefill_time": self.prefill_hist,
            "time_per_output_token": self.tpot_hist,
        }

    def typical_tokens_out(self) -> int | None:
        """The length 90% of recent replies stayed within; None before the first one."""
        if not self._replies:
            return None
        ordered = sorted(self._replies)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]

    def prefill_rate(self, window_s: float = 60.0) -> float | None:
        """Prompt tokens per second over the recent window; None when nothing was measured."""
        now = time.monotonic()
        recent = [(n, s) for ts, n, s in self._prefills if now - ts <= window_s]
        seconds = sum(s for _, s in recent)
        return sum(n for n, _ in recent) / seconds if seconds else None

    def decode_rate(self) -> float:
        """Tokens per second over the recent window, across all slots."""
        now = time.monotonic()
        while self._token_times and now - self._token_times[0][0] > _RATE_WINDOW_S:
            self._token_times.popleft()
        if not self._token_times:
            return 0.0
        span = max(now - self._token_times[0][0], 1.0)
        return sum(n for _, n in self._token_times) / span

    def active_decode_rate(self) -> float | None:
        """Tokens per second across all slots over the latest run of steady decoding (back to
        the last lull); None until a second of it was seen. The queue forecast divides by this:
        a rate from a few tokens, or one diluted by idle time, promised waits of minutes for
        jobs that started in seconds."""
        self.decode_rate()  # drops what fell out of the window
        times = self._token_times
        if len(times) < 2:
            return None
        end = start = times[-1][0]
        tokens = 0
        for k in range(len(times) - 1, 0, -1):
            if start - times[k - 1][0] > _LULL_S:
                break
            tokens += times[k][1]  # the tokens of each step after the run's first
            start = times[k - 1][0]
        return tokens / (end - start) if end - start >= _MIN_RUN_S else None

    def snapshot(
        self,
        *,
        queue_depth: int,
        queue_capacity: int,
        slots_busy: int,
        slots_total: int,
        memory: MemoryUsage | None = None,
        loop_time: tuple[float, float] | None = None,
        guesses: tuple[int, int] = (0, 0),
    ) -> MetricsSnapshot:
        """The counters now, with the GPU's memory when the engine has one, and the time
        its batch loop spent in llama_decode and in all (local engines)."""
        prefill_tps = self.prefill_rate()
        return MetricsSnapshot(
            pool_id=self.pool_id,
            timestamp=time.time(),
            queue_depth=queue_depth,
            queue_capacity=queue_capacity,
            slots_busy=slots_busy,
            slots_total=slots_total,
            accepted=self.accepted,
            rejected=self.rejected,
            completed=self.completed,
            cancelled=self.cancelled,
            failed=self.failed,
            tokens_in_total=self.tokens_in,
            tokens_out_total=self.tokens_out,
            ttft_ms=percentiles(list(self._ttft)),
            latency_ms=percentiles(list(self._latency)),
            decode_tps_recent=round(self.decode_rate(), 2),
            decode_tps_lifetime=round(self.tokens_out / self.decode_s, 2) if self.decode_s else 0.0,
            prefill_tps_recent=round(prefill_tps, 2) if prefill_tps else 0.0,
            prefill_tps_lifetime=round(self.tokens_read / self.prefill_s, 2)
            if self.prefill_s
            else 0.0,
            errors_by_class=dict(self.errors),
            device=memory.device if memory else None,
            device_memory_used_mb=memory.device_used_mb if memory else None,
            device_memory_total_mb=memory.device_total_mb if memory else None,
            decode_seconds_total=round(loop_time[0], 3) if loop_time else None,
            busy_seconds_total=round(loop_time[1], 3) if loop_time else None,
            guessed_tokens_total=guesses[0],
            kept_guesses_total=guesses[1],
        )
