"""Screenshots of every screen, from the real apps on a real host (bundled model).

    .venv/bin/python screenshots/take_screenshots.py

Starts a host on a loopback Hyperswarm testnet (and HTTP on 127.0.0.1), keeps a few
clients busy so the dashboards have something to show, and saves one SVG per screen here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import tempfile
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from infertui.core.client import connect
from infertui.core.config import HostSettings, Settings
from infertui.core.host import HostService
from infertui.core.protocol.common import ChatMessage
from infertui.core.transport.http import HttpServer, create_app
from infertui.core.transport.p2p.host import P2PServer
from infertui.core.transport.p2p.ids import public_key
from infertui.core.transport.p2p.runtime import BRIDGE_DIR, ensure_installed, node_executable
from infertui.tui.app import ClientApp, HostApp
from infertui.tui.local import LocalClient
from infertui.tui.widgets.message import AssistantMessage
from infertui.tui.widgets.prompt import PromptArea

HERE = Path(__file__).parent
SIZE = (100, 30)
STORY = [ChatMessage(role="user", content="Tell me a long story about a lighthouse keeper.")]
log = logging.getLogger("screenshots")


async def settle(pilot: Pilot[object], seconds: float = 1.5) -> None:
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False
    for area in pilot.app.screen.query(TextArea):
        area.cursor_blink = False
    await pilot.pause(seconds)


async def wait_reply(pilot: Pilot[object]) -> None:
    while True:
        views = pilot.app.screen.query(AssistantMessage)
        if views and "tok/s" in str(views.last().stats_line.render()):
            return
        await pilot.pause(0.1)


async def chat_shot(pilot: Pilot[object], question: str, name: str) -> None:
    """Ask in the chat on screen, wait for the whole reply, and save the picture."""
    pilot.app.screen.query_one("#prompt", PromptArea).value = question
    await pilot.press("enter")
    await wait_reply(pilot)
    await settle(pilot, 0.5)
    pilot.app.save_screenshot(name, str(HERE))


async def busy(url: str, stop: asyncio.Event) -> None:
    """A client that keeps asking for long stories, so slots and queue are never empty."""
    async with await connect(url) as client:
        while not stop.is_set():
            await client.chat(STORY, max_tokens=200, temperature=0.7).text()


async def main() -> None:
    modules = await asyncio.to_thread(ensure_installed)
    testnet = await asyncio.create_subprocess_exec(
        node_executable(), str(BRIDGE_DIR / "testnet.js"), "3",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_PATH": str(modules)},
    )  # fmt: skip
    assert testnet.stdout is not None
    assert testnet.stdin is not None
    bootstrap = json.loads(await testnet.stdout.readline())["bootstrap"]
    client_seed = secrets.token_bytes(32)
    host_settings = HostSettings.model_validate(
        {"host_name": "gpu-box", "queue": 16, "drain_on_stop_ms": 0,
         "engine": {"ctx": 2048, "parallel": 2, "threads": 2}}
    )  # fmt: skip
    service = HostService(host_settings)
    service.attach(
        P2PServer(
            service,
            seed=secrets.token_bytes(32),
            bootstrap=bootstrap,
            admins=[public_key(client_seed)],
        )
    )
    http = HttpServer(create_app(service), "127.0.0.1:0")
    service.attach(http)
    await service.start()
    server_id = service.transports[0].describe()

    settings = Settings(bootstrap=bootstrap, client={"max_tokens": 64, "temperature": 0})
    app = ClientApp(server_id, settings, client_seed=client_seed)
    stop = asyncio.Event()
    async with app.run_test(size=SIZE) as pilot:
        while app.client is None:
            await pilot.pause(0.1)
        await chat_shot(pilot, "Give me three tips for writing clean Python code.", "chat.svg")
        await pilot.press("ctrl+t")
        await settle(pilot, 0.5)
        app.save_screenshot("chats.svg", str(HERE))
        await pilot.press("escape")
        helpers = [asyncio.create_task(busy(http.url, stop)) for _ in range(4)]
        await pilot.pause(3)
        for key, name in (("f3", "queue"), ("f4", "metrics"), ("f5", "engines")):
            await pilot.press(key)
            await settle(pilot, 4 if name == "metrics" else 1.5)
            app.save_screenshot(f"{name}.svg", str(HERE))
        await pilot.press("a")
        await settle(pilot, 0.5)
        app.save_screenshot("engine-add.svg", str(HERE))
        await pilot.press("escape")
        await pilot.press("f2", "ctrl+o")
        await settle(pilot, 0.5)
        app.save_screenshot("options.svg", str(HERE))

    dashboard = HostApp(settings, LocalClient(service), start=False)
    async with dashboard.run_test(size=SIZE) as pilot:
        await settle(pilot, 2)
        dashboard.save_screenshot("host-streams.svg", str(HERE))
        await pilot.press("f4")
        await settle(pilot, 4)
        dashboard.save_screenshot("host-metrics.svg", str(HERE))
        stop.set()  # the host's own chat, on a quiet host
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await pilot.press("f6")
        await chat_shot(pilot, "What is a GPU?", "host-chat.svg")
        await pilot.press("f2", "g")
        await settle(pilot, 0.5)
        dashboard.save_screenshot("host-qr.svg", str(HERE))
    await service.stop()
    testnet.stdin.close()
    await testnet.wait()
    log.warning("screenshots saved in %s", HERE)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("INFERTUI_CONFIG", "/nonexistent/infertui-screenshots.toml")
    with tempfile.TemporaryDirectory() as data:  # saved chats stay out of the user's own
        os.environ["INFERTUI_DATA_DIR"] = data
        asyncio.run(main())
