"""What every dashboard screen shares: the host bar, a refresh timer, and plain-words
trouble instead of tracebacks when the host is away."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Static

from infertui.core.client import Client, ConnectionState, explain
from infertui.core.protocol import InferError

from ..base import infertui_app
from ..widgets.host_bar import HostBar


class DashboardScreen(Screen[None]):
    """Calls `refresh_data(client)` every REFRESH_S while the screen is shown."""

    REFRESH_S = 1.0
    _busy = False  # a slow host must not stack refreshes up

    def on_mount(self) -> None:
        self.set_interval(self.REFRESH_S, self._tick)
        self.call_after_refresh(self._tick)
        self.watch(infertui_app(self), "connection", self._connection_changed, init=False)

    def _connection_changed(self, _: ConnectionState) -> None:
        self.call_later(self.refresh_now)

    def on_screen_resume(self) -> None:
        self.call_after_refresh(self._tick)

    async def refresh_now(self) -> None:
        await self._tick()

    async def _tick(self) -> None:
        if not self.is_current or self._busy:
            return
        self._busy = True
        try:
            await self._refresh()
        finally:
            self._busy = False

    async def _refresh(self) -> None:
        app = infertui_app(self)
        client = app.dashboard_client()
        trouble = self.query_one("#trouble", Static)
        if client is None:  # the host bar says it; the banner is for trouble, not for a start
            trouble.update(app.connection.message)  # (whole, where the bar cuts it short)
            bar = self.query_one(HostBar)
            trouble.display = app.connection.phase != "connecting" and not bar.shows_all()
            self.show_last()
            return
        try:
            await self.refresh_data(client)
        except InferError as err:
            trouble.update(explain(err))
            trouble.display = True
            return
        trouble.display = False

    async def refresh_data(self, client: Client) -> None:
        raise NotImplementedError

    def show_last(self) -> None:
        """While the host is away: what the app still holds, where the screen has any (the
        tables that were shown stay as they were)."""
