"""The host's front page: who it is, how to reach it, and every stream it is writing now."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label, Static

from infertui.core.client import Client

from ..base import LiveSource, infertui_app
from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from ..widgets.tables import cleared, tail_cells
from .dashboard import DashboardScreen
from .qr import QrModal

TAIL_CELLS = 40  # of the latest text: a wide character takes two


class StreamsScreen(DashboardScreen):
    REFRESH_S = 0.25
    BINDINGS = [
        Binding("c", "copy_id", "Copy ID", id="host.copy_id", tooltip="Server ID to clipboard"),
        Binding("g", "qr", "QR code", id="host.qr"),
    ]

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        yield Static("", id="addresses")
        yield Label("Live streams", classes="section")
        yield DataTable(id="streams", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#streams", DataTable).add_columns(
            # the live text before the long ids: at 80 columns the ids are what is cut off
            "client",
            "state",
            "tokens",
            "tok/s",
            "latest text",
            "engine",
            "job",
        )
        super().on_mount()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("copy_id", "qr"):  # a host with --no-p2p has no server ID to give
            return self.server_id() is not None
        return True

    def server_id(self) -> str | None:
        source = infertui_app(self).live
        return source.addresses().get("p2p") if source else None

    async def refresh_data(self, client: Client) -> None:
        source = infertui_app(self).live
        if source is None:
            return
        lines = Text()
        for name, address in source.addresses().items():
            label = {"p2p": "server ID", "http": "HTTP API"}.get(name, name)
            lines.append(f"{label:>10}  ", style="dim")
            lines.append(f"{address}\n", style="bold")
        states = source.transport_status()
        if states:
            lines.append(f"{'network':>10}  ", style="dim")
            for k, (name, state) in enumerate(states.items()):
                title = {"p2p": "Hyperswarm", "http": "HTTP"}.get(name, name)
                trouble = state.startswith(("not ", "unavailable"))  # unreachable: in red
                lines.append(" · " if k else "")
                lines.append(f"{title} {state}", style="bold red" if trouble else "")
            lines.append("\n")
        models = ", ".join(client.info.models) or "none loaded"
        lines.append(f"{'models':>10}  ", style="dim")
        lines.append(models)
        self.query_one("#addresses", Static).update(lines)
        self.show_jobs(source)

    def show_jobs(self, source: LiveSource) -> None:
        table = self.query_one("#streams", DataTable)
        cleared(table)
        for job in source.live_jobs():
            tail = tail_cells(job.text_tail.replace("\n", " ⏎ "), TAIL_CELLS)
            table.add_row(
                job.client, job.state, job.tokens_out,
                f"{job.tokens_per_s:.1f}" if job.state == "running" else "", tail, job.engine,
                job.job_id,
            )  # fmt: skip
        table.border_title = f"{table.row_count} in flight"

    def action_copy_id(self) -> None:
        server_id = self.server_id()
        if server_id:
            self.app.copy_to_clipboard(server_id)
            self.notify("Server ID copied (your terminal must allow OSC 52).")
        else:
            self.notify("This host is not on Hyperswarm (--no-p2p).", severity="warning")

    def action_qr(self) -> None:
        server_id = self.server_id()
        if server_id:
            self.app.push_screen(QrModal(server_id))
