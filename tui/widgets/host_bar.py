"""The one-line bar at the top of every screen: which host, over what, and its state."""

from __future__ import annotations

import math
import time

from rich.cells import cell_len
from rich.text import Text
from textual.timer import Timer
from textual.widgets import Static

from infertui.core.client import ConnectionState

from ..base import infertui_app
from ..local import LocalClient

PHASE_STYLE = {
    "connected": ("●", "green"),
    "connecting": ("◌", "yellow"),
    "waiting": ("○", "red"),
    "closed": ("✕", "red"),
}
TROUBLE = ("not ", "unavailable")  # a transport status that means nobody can reach the host


def short_id(address: str) -> str:
    """A server ID shortened for a narrow bar (URLs stay whole)."""
    if address.startswith(("http://", "https://")) or len(address) <= 16:
        return address
    return f"{address[:8]}…{address[-4:]}"


class HostBar(Static):
    """Shows the app's connection state, following it as it changes."""

    DEFAULT_CSS = """
    HostBar {
        dock: top; height: 1; background: $panel; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    """

    clock = staticmethod(time.monotonic)  # snapshot tests freeze it

    def __init__(self) -> None:
        super().__init__()
        self.state: ConnectionState | None = None
        self.retry_at = 0.0
        self.countdown: Timer | None = None

    def on_mount(self) -> None:
        self.countdown = self.set_interval(1, self.render_state, pause=True)
        self.set_interval(2, self.render_state)  # a host's own network state changes by itself
        self.watch(infertui_app(self), "connection", self.show)

    def show(self, state: ConnectionState) -> None:
        self.state = state
        if state.retry_in_s is not None:
            self.retry_at = self.clock() + state.retry_in_s
        if self.countdown is not None:
            # While waiting to retry, tick once a second so the countdown moves.
            if state.retry_in_s is not None:
                self.countdown.resume()
            else:
                self.countdown.pause()
        self.render_state()

    def render_state(self) -> None:
        state = self.state
        if state is None:
            return
        dot, colour = PHASE_STYLE[state.phase]
        client = state.client
        trouble = self.network_trouble(client)
        model = ""
        if client is not None:
            model = infertui_app(self).options.model or client.info.model  # what a chat asks
            if model in client.info.unready:
                trouble = f"{model} not ready" + (f" · {trouble}" if trouble else "")
        if trouble and state.phase == "connected":
            dot, colour = "◐", "yellow"  # serving, but not everyone can reach it
        line = Text.assemble((f"{dot} ", colour))
        if client is not None:
            info = client.info
            line.append(info.host_name, style="bold")
            line.append(f" · {model or 'no model'}")
            if info.transport == "http":  # the URL says it ("http http://…" said it twice)
                line.append(f" · {info.address}", style="dim")
            elif info.transport != "local":
                line.append(f" · {info.transport} {short_id(info.address)}", style="dim")
            if not info.admin:
                line.append(" · read-only", style="dim")
            if trouble:
                line.append(f" · {trouble}", style="yellow")
        else:
            if state.retry_in_s is not None:
                left = max(0, math.ceil(self.retry_at - self.clock()))
                line.append(f"Retrying in {left} s (Ctrl+R: now) · ", style="bold")
            line.append(state.message)
        self.update(line)
        self.tooltip = line.plain  # the whole line, where a narrow terminal cuts it short

    def shows_all(self) -> bool:
        """Whether the whole line fits the bar (a dashboard's banner then need not repeat it)."""
        return cell_len(str(self.tooltip or "")) <= self.content_size.width

    @staticmethod
    def network_trouble(client: object) -> str:
        """On the host itself: a transport nobody can reach it through (a DHT no node
        answers, say); '' when all is well, and always on a remote client."""
        if not isinstance(client, LocalClient):
            return ""
        for name, status in client.transport_status().items():
            if status.startswith(TROUBLE):
                return f"{'Hyperswarm' if name == 'p2p' else name.upper()} {status}"
        return ""
