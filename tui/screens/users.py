"""Who uses the host: each identity's jobs now and its budgets, then the ledger's days.

An admin (and the person at the host) sees everyone; any other client its own rows."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable, Label, Static

from infertui.core.client import Client
from infertui.core.protocol import UserLimits, UserShare

from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from ..widgets.tables import cleared
from .dashboard import DashboardScreen


class UsersScreen(DashboardScreen):
    REFRESH_S = 2.0

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        yield Label("Now", classes="section")
        yield DataTable(id="users", cursor_type="row", zebra_stripes=True)
        yield Label("By day (UTC)", classes="section")
        yield DataTable(id="days", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#users", DataTable).add_columns(
            "who", "running", "waiting", "req/min", "tok/min", "today", "limits"
        )
        self.query_one("#days", DataTable).add_columns(
            "day", "who", "jobs", "failed", "tokens in", "tokens out", "queued s", "decode s"
        )
        super().on_mount()

    async def refresh_data(self, client: Client) -> None:
        report = await client.usage()
        users = cleared(self.query_one("#users", DataTable))
        for user in report.users:
            users.add_row(
                user.identity, user.running, user.queued, user.requests_last_minute,
                user.tokens_last_minute, _today(user), _limits(user.limits),
            )  # fmt: skip
        days = cleared(self.query_one("#days", DataTable))
        for day in sorted(report.days, key=lambda d: (d.day, d.identity), reverse=True):
            days.add_row(
                day.day, day.identity, day.jobs, day.failures or "", day.tokens_in,
                day.tokens_out, f"{day.queue_ms / 1000:.1f}", f"{day.decode_ms / 1000:.1f}",
            )  # fmt: skip
        days.border_title = "" if report.ledger else "this host keeps no ledger"


def _today(user: UserShare) -> str:
    cap = user.limits.tokens_per_day
    return f"{_count(user.tokens_today)} / {_count(cap)}" if cap else _count(user.tokens_today)


def _limits(limits: UserLimits) -> str:
    """What sets this identity apart, in a few words: "×2 · 4 run · 20k tpm"."""  # noqa: RUF002
    said = [f"×{limits.weight:g}"] if limits.weight != 1 else []
    for value, unit in (
        (limits.running, "run"),
        (limits.queued, "wait"),
        (limits.requests_per_minute, "rpm"),
        (limits.tokens_per_minute, "tpm"),
    ):
        if value is not None:
            said.append(f"{_count(value)} {unit}")
    return " · ".join(said) or "-"


def _count(n: int) -> str:
    """A count as a narrow table shows it: 950, 48.2k, 1.2M."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}k".replace(".0k", "k") if n >= 10_000 else str(n)
