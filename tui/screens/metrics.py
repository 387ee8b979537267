"""Live metrics: sparklines of throughput, queue depth, latency and load, and the totals."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.widgets import DataTable, Label, Sparkline, Static

from infertui.core.client import Client

from ..base import infertui_app
from ..metrics_history import COUNTS, PLOTS
from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from ..widgets.tables import cleared
from .dashboard import DashboardScreen


class MetricsScreen(DashboardScreen):
    REFRESH_S = 1.0

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        with Grid(id="plots"):
            for key, title in PLOTS.items():
                with Vertical(classes="plot"):
                    yield Label(title, id=f"label-{key}", classes="plot-title")
                    yield Sparkline([], id=f"plot-{key}", summary_function=max)
        yield DataTable(id="totals", cursor_type="none", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        # narrow enough for 80 columns: errors are failed + rejected; TTFT in ms, latency in s
        self.query_one("#totals", DataTable).add_columns(
            "engine", "done", "cancel", "errors", "tokens", "TTFT p50/95", "total p50/95",
            "tok/s",
        )  # fmt: skip
        super().on_mount()

    async def refresh_data(self, client: Client) -> None:
        history = infertui_app(self).metrics_history
        if not history.latest:
            history.add(await client.metrics())
        self.show_last()

    def show_last(self) -> None:
        """The app's minute of history: kept while the host is away, so it shows then too."""
        history = infertui_app(self).metrics_history
        latencies = [p.ttft_ms.p50 for p in history.latest]
        for key, series in history.series.items():
            # a leading zero pins the scale's floor, so a steady load does not draw as flat
            self.query_one(f"#plot-{key}", Sparkline).data = [0.0, *series]
            latest = series[-1] if series else 0.0
            figure = f"{latest:,.0f}" if key in COUNTS else f"{latest:,.1f}"
            if key == "decoding" and not history.decoding_known():
                figure = "–"  # upstreams only, or a single snapshot so far
            if key.startswith("ttft") and all(v is None for v in latencies):
                figure = "–"  # no job has finished yet: as the table says
            self.query_one(f"#label-{key}", Label).update(f"{PLOTS[key]}  {figure}")
        table = self.query_one("#totals", DataTable)
        cleared(table)
        for p in history.latest:
            table.add_row(
                p.pool_id, p.completed, p.cancelled, p.failed + p.rejected, p.tokens_out_total,
                _pair(p.ttft_ms.p50, p.ttft_ms.p95, "ms"),
                _pair(p.latency_ms.p50, p.latency_ms.p95, "s"), f"{p.decode_tps_recent:.1f}",
            )  # fmt: skip


def _pair(a: float | None, b: float | None, unit: str) -> str:
    """Two percentiles of milliseconds, as ms or as seconds."""
    if a is None:
        return "–"
    if unit == "s":
        return f"{a / 1000:.1f}/{(b or 0) / 1000:.1f} s"
    return f"{a:.0f}/{b or 0:.0f} ms"
