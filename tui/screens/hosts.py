"""The hosts this client reaches, with their load: every host on a topic (a chat goes to the
one with the most room), or the one host it is connected to."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from infertui.core.client import Client

from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar, short_id
from ..widgets.tables import cleared
from .dashboard import DashboardScreen


class HostsScreen(DashboardScreen):
    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        yield DataTable(id="hosts", cursor_type="row", zebra_stripes=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#hosts", DataTable).add_columns(
            "host", "address", "models", "slots", "free", "queued"
        )
        super().on_mount()

    async def refresh_data(self, client: Client) -> None:
        hosts = await client.hosts()
        table = self.query_one("#hosts", DataTable)
        cleared(table)
        for h in hosts:
            table.add_row(
                h.host_name, short_id(h.address), ", ".join(h.models), h.slots, h.free_slots,
                h.queue_depth, key=h.address,
            )  # fmt: skip
        where = "on the topic" if client.info.address.startswith("topic:") else "connected"
        table.border_title = f"{len(hosts)} host{'s' if len(hosts) != 1 else ''} {where}"
