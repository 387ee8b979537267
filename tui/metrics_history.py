"""The last minute of host-wide figures, kept by the app from the moment it connects."""

from __future__ import annotations

from collections import deque

from infertui.core.protocol import MetricsSnapshot

HISTORY = 60  # samples kept per plot (a minute at one a second)
PLOTS = {
    "tps": "tokens/s",
    "depth": "queue depth",
    "ttft": "TTFT p50 ms",
    "ttft95": "TTFT p95 ms",
    "busy": "busy slots",
    "errors": "errors (failed + rejected)",
    "prefill": "prompt tokens/s",
    "decoding": "decoding % of time",
}
COUNTS = frozenset({"depth", "busy", "errors", "decoding"})  # shown without decimals


def decoding_percent(before: MetricsSnapshot | None, now: MetricsSnapshot) -> float | None:
    """The part of the time between two snapshots of one pool that its device spent
    decoding, in %: below 100 under load, the device waits for the host. None on the first
    snapshot, for an engine that does not say (an upstream) and across a reload."""
    if before is None or before.decode_seconds_total is None or now.decode_seconds_total is None:
        return None
    elapsed = now.timestamp - before.timestamp
    if elapsed <= 0:
        return None
    decoded = now.decode_seconds_total - before.decode_seconds_total
    if decoded < 0:
        return None  # the engine was reloaded: its counters started again
    return min(100.0, 100 * decoded / elapsed)  # the totals are rounded to the millisecond


def host_totals(
    pools: list[MetricsSnapshot], decoding: dict[str, float | None] | None = None
) -> dict[str, float]:
    """One figure per plot for the whole host (latency: the worst engine's; decoding: the
    busiest device's, from `decoding`, each pool's decoding_percent)."""
    return {
        "tps": sum(p.decode_tps_recent for p in pools),
        "depth": sum(p.queue_depth for p in pools),
        "ttft": max((p.ttft_ms.p50 or 0.0 for p in pools), default=0.0),
        "ttft95": max((p.ttft_ms.p95 or 0.0 for p in pools), default=0.0),
        "busy": sum(p.slots_busy for p in pools),
        "errors": sum(p.failed + p.rejected for p in pools),
        "prefill": sum(p.prefill_tps_recent for p in pools),
        "decoding": max((v for v in (decoding or {}).values() if v is not None), default=0.0),
    }


class MetricsHistory:
    """The last minute of host-wide figures. The app keeps it from the moment it connects,
    so the plots are already full when the screen opens."""

    def __init__(self) -> None:
        self.series: dict[str, deque[float]] = {k: deque(maxlen=HISTORY) for k in PLOTS}
        self.latest: list[MetricsSnapshot] = []
        self.decoding: dict[str, float | None] = {}  # per pool, since the snapshot before

    def decoding_known(self) -> bool:
        """Whether any engine's decoding share is known (none is for upstreams only)."""
        return any(value is not None for value in self.decoding.values())

    def add(self, pools: list[MetricsSnapshot]) -> None:
        before = {p.pool_id: p for p in self.latest}
        self.decoding = {p.pool_id: decoding_percent(before.get(p.pool_id), p) for p in pools}
        self.latest = pools
        for key, value in host_totals(pools, self.decoding).items():
            self.series[key].append(value)
