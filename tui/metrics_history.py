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
}
COUNTS = frozenset({"depth", "busy", "errors"})  # whole numbers: shown without decimals


def host_totals(pools: list[MetricsSnapshot]) -> dict[str, float]:
    """One figure per plot for the whole host (latency: the worst engine's)."""
    return {
        "tps": sum(p.decode_tps_recent for p in pools),
        "depth": sum(p.queue_depth for p in pools),
        "ttft": max((p.ttft_ms.p50 or 0.0 for p in pools), default=0.0),
        "ttft95": max((p.ttft_ms.p95 or 0.0 for p in pools), default=0.0),
        "busy": sum(p.slots_busy for p in pools),
        "errors": sum(p.failed + p.rejected for p in pools),
    }


class MetricsHistory:
    """The last minute of host-wide figures. The app keeps it from the moment it connects,
    so the plots are already full when the screen opens."""

    def __init__(self) -> None:
        self.series: dict[str, deque[float]] = {k: deque(maxlen=HISTORY) for k in PLOTS}
        self.latest: list[MetricsSnapshot] = []

    def add(self, pools: list[MetricsSnapshot]) -> None:
        self.latest = pools
        for key, value in host_totals(pools).items():
            self.series[key].append(value)
