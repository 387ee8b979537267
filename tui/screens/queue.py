"""The host's queue: every slot and what runs in it, every waiting job and its predicted start."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable, Label, Static

from infertui.core.client import Client

from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from .dashboard import DashboardScreen


class QueueScreen(DashboardScreen):
    REFRESH_S = 0.5

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        yield Label("Slots", classes="section")
        yield DataTable(id="slots", cursor_type="row", zebra_stripes=True)
        yield Label("Waiting", classes="section")
        yield DataTable(id="waiting", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        slots = self.query_one("#slots", DataTable)
        # figures first, long ids last: at 80 columns the ids are what is cut off
        slots.add_columns("engine", "slot", "phase", "in", "out", "tok/s", "who", "job")
        waiting = self.query_one("#waiting", DataTable)
        waiting.add_columns("engine", "#", "who", "starts in", "waited", "tokens in", "job")
        super().on_mount()

    async def refresh_data(self, client: Client) -> None:
        pools = await client.queue()
        slots = self.query_one("#slots", DataTable)
        slots.clear()
        for pool in pools:
            for s in pool.slots:
                busy = s.phase != "idle"
                slots.add_row(
                    pool.pool_id, s.slot, s.phase, s.tokens_in if busy else "",
                    s.tokens_out if busy else "", f"{s.tps:.1f}" if busy else "",
                    s.identity or s.client_id or "", s.job_id or "",
                )  # fmt: skip
        waiting = self.query_one("#waiting", DataTable)
        waiting.clear()
        for pool in pools:
            for e in pool.waiting:
                who = e.identity or e.client_id or ""
                who += " (batch)" if e.priority == "batch" else ""
                waiting.add_row(
                    pool.pool_id, e.position + 1, who,
                    f"≈ {e.predicted_start_ms / 1000:.1f} s", f"{e.waited_ms / 1000:.1f} s",
                    e.tokens_in, e.job_id,
                )  # fmt: skip
        depth = sum(p.depth for p in pools)
        capacity = sum(p.capacity for p in pools)
        self.query_one("#waiting", DataTable).border_title = f"{depth} of {capacity} queued"
