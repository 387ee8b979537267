"""The host dashboard (`infertui host` on a terminal) driven by Pilot, hosting for real."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Static

from infertui.core.client import connect
from infertui.core.config import Settings
from infertui.core.protocol.common import ChatMessage
from infertui.tui.app import HostApp
from infertui.tui.headless import build_service
from infertui.tui.local import LocalClient
from infertui.tui.screens.qr import QrModal

from .test_client_app import until

pytestmark = pytest.mark.model


def host_settings() -> Settings:
    return Settings.model_validate(
        {"host": {"queue": 8, "drain_on_stop_ms": 0, "host_name": "test-host",
                  "engine": {"ctx": 1024, "parallel": 2, "threads": 2},
                  "p2p": {"enabled": False}, "http": {"listen": "127.0.0.1:0"}}}
    )  # fmt: skip


async def test_the_dashboard_shows_a_remote_stream_live_and_stops_the_host_on_quit() -> None:
    settings = host_settings()
    service = build_service(settings)
    app = HostApp(settings, LocalClient(service))
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.client is not None, 60)
        url = next(t.describe() for t in service.transports if t.name == "http")
        addresses = app.screen.query_one("#addresses", Static)
        await until(pilot, lambda: url in str(addresses.render()))
        assert "HTTP API" in str(addresses.render())

        client = await connect(url)
        reply = client.chat(
            [ChatMessage(role="user", content="Tell me a long story.")],
            max_tokens=300,
            temperature=0,
        )
        seen: list[str] = []

        async def read() -> None:
            seen.extend([piece async for piece in reply])

        reader = asyncio.create_task(read())
        table = app.screen.query_one("#streams", DataTable)
        await until(pilot, lambda: table.row_count == 1 and len(seen) > 8, 30)
        row = table.get_row_at(0)
        assert str(row[1]).startswith("http:127.0.0.1") and row[2] == "running"
        assert str(row[5]).strip()  # the reply's latest text, live
        reply.abort()
        await reader
        await until(pilot, lambda: table.row_count == 0, 10)
        await client.close()

        await pilot.press("g")  # no P2P in this test: the QR key says so instead of failing
        assert not isinstance(app.screen, QrModal)
        await pilot.press("ctrl+q")
        await until(pilot, lambda: not app.is_running, 20)
    assert service.registry.ids() == []  # quitting stopped the host and freed its engines
