"""Snapshots of every screen at 80x24 (the SSH default), with a scripted host so that the
pictures are deterministic. Update on purpose with `pytest --snapshot-update`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from infertui.core.client import ConnectionState
from infertui.core.config import Settings
from infertui.tui.screens.dashboard import DashboardScreen
from infertui.tui.widgets.host_bar import HostBar
from infertui.tui.widgets.message import AssistantMessage
from infertui.tui.widgets.prompt import PromptArea

from .scripted import ScriptedClientApp, ScriptedHostApp

SIZE = (80, 24)
Snap = Callable[..., bool]


@pytest.fixture(autouse=True)
def refresh_when_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dashboards refresh when settle() says, not on their timers as well: a timed refresh
    that landed between settle() and the screenshot cleared a table, whose columns were then
    as narrow as their labels in the picture (the Streams screen refreshes every 0.25 s)."""
    screens = [DashboardScreen]
    while screens:
        screen = screens.pop()
        screens.extend(screen.__subclasses__())
        monkeypatch.setattr(screen, "REFRESH_S", 3600.0)


async def settle(pilot: Pilot[object]) -> None:
    """Refresh the dashboard now (three times, so plots have a history) and stop blinking."""
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False
    for area in pilot.app.screen.query(PromptArea):
        area.cursor_blink = False
    screen = pilot.app.screen
    if isinstance(screen, DashboardScreen):
        for _ in range(3):
            await screen._tick()
    # A DataTable sizes its columns to new rows when it is next idle: wait for that (three
    # workers on two cores once took the screenshot first, columns as wide as their labels),
    # and for the rows themselves, which the scripted host sends a moment later (a loaded
    # suite once took the screenshot between the rows and their sizing). A table that stays
    # empty is waited for half a second at most.
    for tick in range(200):
        tables = list(screen.query(DataTable))
        filled = all(table.row_count for table in tables) or tick >= 50
        if filled and not any(table._require_update_dimensions for table in tables):
            break
        await pilot.pause(0.01)
    await pilot.pause()


def go(*keys: str) -> Callable[[Pilot[object]], Awaitable[None]]:
    async def run_before(pilot: Pilot[object]) -> None:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        await settle(pilot)

    return run_before


def test_chat_after_a_reply(snap_compare: Snap) -> None:
    async def run_before(pilot: Pilot[object]) -> None:
        app = pilot.app
        app.screen.query_one("#prompt", PromptArea).value = "Name three colours."
        await pilot.press("enter")
        while not app.screen.query(AssistantMessage) or "tok/s" not in str(
            app.screen.query(AssistantMessage).last().stats_line.render()
        ):
            await pilot.pause(0.02)
        await settle(pilot)

    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=run_before)


def test_queue(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f3"))


def test_metrics(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f4"))


def test_engines(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f5"))


def test_engines_read_only(snap_compare: Snap) -> None:
    app = ScriptedClientApp(Settings(), admin=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=go("f5"))


def test_add_engine_form(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f5", "a"))


def test_options(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("ctrl+o"))


def test_host_down(snap_compare: Snap, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HostBar, "clock", staticmethod(lambda: 100.0))  # the countdown holds still

    async def run_before(pilot: Pilot[object]) -> None:
        app = pilot.app
        assert isinstance(app, ScriptedClientApp)
        app.set_connection(
            ConnectionState(
                "waiting", "No host is answering at that address right now.", retry_in_s=4.0
            )
        )
        await settle(pilot)

    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=run_before)


def test_host_streams(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedHostApp(Settings()), terminal_size=SIZE, run_before=go())


def test_host_qr(snap_compare: Snap) -> None:
    assert snap_compare(ScriptedHostApp(Settings()), terminal_size=SIZE, run_before=go("g"))


def test_users(snap_compare: Snap) -> None:
    """F7: who uses the host now, their limits, and the ledger's days."""
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f7"))


def test_hosts(snap_compare: Snap) -> None:
    """F6: the hosts this client reaches (one here; every host of a topic there)."""
    assert snap_compare(ScriptedClientApp(Settings()), terminal_size=SIZE, run_before=go("f6"))
