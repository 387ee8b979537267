"""What both apps share, and all a screen may read from its app: typed attributes, not
lookups by name. The connection state is reactive: every host bar and dashboard watches it,
so a change reaches each screen without the app walking its screens."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from textual import work
from textual.app import App
from textual.dom import DOMNode
from textual.reactive import reactive

from infertui.core.client import Client, ConnectionState
from infertui.core.config import ClientSettings, Settings
from infertui.core.protocol import InferError, LiveJob

from .metrics_history import MetricsHistory

METRICS_EVERY_MS = 1000
ENGINES_EVERY_S = 3.0  # how often the app looks at the host's engine list


class LiveSource(Protocol):
    """What the host screen reads beyond the Client API: the jobs in flight, their text."""

    def live_jobs(self) -> list[LiveJob]: ...
    def addresses(self) -> dict[str, str]: ...
    def transport_status(self) -> dict[str, str]: ...


class InfertuiApp(App[int]):
    """The state every screen reads: the client while connected, the connection's state,
    the metrics history, the chat options and, on a host, its live jobs."""

    connection: reactive[ConnectionState] = reactive(
        ConnectionState("connecting", "Starting…"), always_update=True, init=False
    )

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.client: Client | None = None
        self.metrics_history = MetricsHistory()
        self.options: ClientSettings = settings.client
        self.live: LiveSource | None = None
        if settings.keymap:
            self.set_keymap(settings.keymap)
        if settings.ui.theme in self.available_themes:
            self.theme = settings.ui.theme

    def set_connection(self, state: ConnectionState) -> None:
        """Attributes down: every screen's bar shows the new state, dashboards refresh."""
        self.client = state.client if state.phase == "connected" else None
        self.connection = state
        if state.phase == "connected" and state.client is not None:
            self.collect_metrics(state.client)
            self.follow_engines(state.client)

    def dashboard_client(self) -> Client | None:
        """The client the dashboards read: the connection's."""
        return self.client

    def not_connected(self) -> str:
        """Why there is no host to ask now, for a notification."""
        state = self.connection
        if state.phase == "waiting":
            return "The host cannot be reached now; retrying (Ctrl+R tries at once)."
        return "Not connected to a host yet."

    @work(exclusive=True, group="engines")
    async def follow_engines(self, client: Client) -> None:
        """Engines come and go (the engine manager, another admin): the host bar, the model
        picker and the chat follow, instead of the list seen at connect."""
        while self.client is client:
            await self.update_host_info()
            await asyncio.sleep(ENGINES_EVERY_S)

    async def update_host_info(self) -> None:
        """Read the host's engines now; every bar shows the change."""
        client = self.client
        if client is None:
            return
        with contextlib.suppress(InferError):
            if await client.update_info() and self.client is client:
                chosen = self.options.model
                if (
                    chosen
                    and chosen not in client.info.models
                    and not await in_library(client, chosen)
                ):  # removed (not merely unloaded after its keep_alive): the default answers
                    self.options = self.options.model_copy(update={"model": None})
                    self.notify(
                        f"The host no longer serves {chosen}: chats go to {client.info.model}.",
                        severity="warning",
                    )
                self.connection = self.connection  # always_update: the watchers redraw

    @work(exclusive=True, group="metrics")
    async def collect_metrics(self, client: Client) -> None:
        """Metrics history from connect on (pushed by the host over Hyperswarm, polled over
        HTTP); a new connection's collector replaces the old one."""
        with contextlib.suppress(InferError):
            async for pools in client.watch_metrics(METRICS_EVERY_MS):
                self.metrics_history.add(pools)


def infertui_app(node: DOMNode) -> InfertuiApp:
    """The app a screen or widget runs in, typed."""
    app = node.app
    assert isinstance(app, InfertuiApp), "infertui's screens run in an InfertuiApp"
    return app


async def in_library(client: Client, name: str) -> bool:
    """Whether the host's library has `name`: a chat naming it loads it again."""
    try:
        return any(entry.name == name for entry in await client.library())
    except InferError:
        return False
