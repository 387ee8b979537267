"""The host dashboard (`infertui host` on a terminal) driven by Pilot, hosting for real."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time

import httpx
import pytest
from textual.widgets import DataTable, Static

from infertui.app.host import build_service
from infertui.core.client import connect
from infertui.core.config import Settings
from infertui.core.protocol.common import ChatMessage
from infertui.tui.app import HostApp
from infertui.tui.local import LocalClient
from infertui.tui.screens.qr import QrModal

from ..conftest import THREADS, until, wait_until

pytestmark = pytest.mark.model


def host_settings() -> Settings:
    return Settings.model_validate(
        {"host": {"queue": 8, "drain_on_stop_ms": 0, "host_name": "test-host",
                  "engine": {"ctx": 1024, "parallel": 2, "threads": THREADS},
                  "p2p": {"enabled": False}, "http": {"listen": "127.0.0.1:0"}}}
    )  # fmt: skip


async def test_the_dashboard_shows_a_remote_stream_live_and_stops_the_host_on_quit() -> None:
    settings = host_settings()
    service = build_service(settings)
    app = HostApp(settings, LocalClient(service))
    async with app.run_test(size=(110, 30)) as pilot:
        bar = app.screen.query_one("HostBar", Static)
        await until(pilot, lambda: "Loading the model" in str(bar.render()))
        trouble = app.screen.query_one("#trouble", Static)  # said once: in the bar, no banner
        assert not trouble.display, "a start is not trouble"
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
            async for piece in reply:  # piece by piece: the check below looks mid-reply
                seen.append(piece)

        reader = asyncio.create_task(read())
        table = app.screen.query_one("#streams", DataTable)

        def live_row() -> bool:  # the table refreshes every REFRESH_S: wait for one with text
            return (
                table.row_count == 1 and len(seen) > 8 and bool(str(table.get_row_at(0)[4]).strip())
            )

        await until(pilot, live_row, 30)
        row = table.get_row_at(0)  # the reply's latest text, live, while it is written
        assert str(row[0]).startswith("http:127.0.0.1") and row[1] == "running"
        reply.abort()
        await reader
        await until(pilot, lambda: table.row_count == 0, 10)
        await client.close()

        await pilot.press("g")  # no P2P in this test: no QR code, and the footer offers none
        assert not isinstance(app.screen, QrModal)
        assert "g" not in app.active_bindings and "c" not in app.active_bindings
        shown = app.active_bindings["q"].binding  # in the footer
        assert shown.description == "Quit" and shown.show
        await pilot.press("q")  # as the README says (and the footer shows)
        await until(pilot, lambda: not app.is_running, 20)
    assert service.engine_ids() == []  # quitting stopped the host and freed its engines


async def test_ctrl_c_stops_the_host_as_the_readme_says() -> None:
    settings = host_settings()
    service = build_service(settings)
    app = HostApp(settings, LocalClient(service))
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.client is not None, 60)
        await pilot.press("ctrl+c")
        await until(pilot, lambda: not app.is_running, 20)
    assert service.engine_ids() == []


async def test_a_second_quit_stops_at_once_without_waiting_out_the_grace() -> None:
    """The first q gives running replies their grace (here a minute) and says a second q
    stops now; the second cancels them, and the dashboard ends at once."""
    settings = host_settings()
    settings.host.drain_on_stop_ms = 60_000
    service = build_service(settings)
    app = HostApp(settings, LocalClient(service))
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.client is not None, 60)
        url = next(t.describe() for t in service.transports if t.name == "http")
        client = await connect(url)
        reply = client.chat([ChatMessage(role="user", content="Tell me a long story.")],
                            max_tokens=900, temperature=0, ignore_eos=True)  # fmt: skip
        pieces = aiter(reply)
        await anext(pieces)  # under way
        await pilot.press("q")
        bar = app.screen.query_one("HostBar", Static)
        await until(pilot, lambda: "q again: now" in str(bar.render()))
        assert app.is_running and reply.stats is None  # the grace: the reply goes on
        # and the Live streams table shows it going on (it stood still while the host drained)
        table = app.screen.query_one("#streams", DataTable)

        def tokens() -> int:
            return int(table.get_row_at(0)[2]) if table.row_count else 0

        before = tokens()
        await until(pilot, lambda: tokens() > before + 5)
        # said once, in the bar (it fits): no banner under it with the same words
        assert not app.screen.query_one("#trouble", Static).display
        await pilot.press("f3")  # the queue too reads the draining host (it stood still)
        slots = app.screen.query_one("#slots", DataTable)
        await until(pilot, lambda: slots.row_count and slots.get_row_at(0)[2] != "idle")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 20)
        async for _ in pieces:  # the reply ends, cut short, without a hang
            pass
        assert reply.stats is not None and reply.stats.finish_reason == "abort"
        await client.close()
    assert service.engine_ids() == []


async def test_a_model_that_cannot_load_ends_the_dashboard_with_the_reason(tmp_path) -> None:
    """Issue 13: `host --model /nope.gguf` on a terminal exits 1 and says why, instead of
    leaving a dashboard that serves nothing."""
    settings = host_settings()
    settings.host.models = [str(tmp_path / "nope.gguf")]
    app = HostApp(settings, LocalClient(build_service(settings)))
    async with app.run_test(size=(110, 30)):
        # not `until`: a pilot pause on an app that is closing can wait for messages that no
        # one will handle any more (a 30 s WaitForScreenTimeout in CI)
        await wait_until(lambda: not app.is_running, 30)
    assert app.return_code == 1
    assert "nope.gguf" in app.start_error


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, None], ids=["sigterm", "sighup", "hang-up"]
)
def test_the_dashboard_host_stops_gracefully_on_sigterm_and_sighup(tmp_path, sig) -> None:
    """`infertui host` on a real terminal (a pty, its controlling one): kill, SIGHUP, or a
    closed SSH session drains it. A closed session's terminal goes first (None: its other end
    closes, and the kernel sends SIGHUP), here while a reply streams: the reply gets its
    grace and the process ends, though nothing it draws reaches a terminal any more (it
    waited on that forever, the grace's deadline with it)."""
    port = free_port()
    env = {**os.environ, "INFERTUI_STATE_DIR": str(tmp_path), "INFERTUI_CONFIG_DIR": str(tmp_path),
           "INFERTUI_DATA_DIR": str(tmp_path), "TERM": "xterm-256color",
           "INFERTUI_HOST__DRAIN_ON_STOP_MS": "3000"}  # fmt: skip
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--no-p2p", "--parallel", "1",
         "--http", f"127.0.0.1:{port}"],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # as a login's terminal
    )  # fmt: skip
    os.close(slave)
    screen, done = bytearray(), threading.Event()
    reader = threading.Thread(target=read_all, args=(master, screen, done), daemon=True)
    reader.start()  # the app blocks if nobody reads its terminal
    log = tmp_path / "infertui.log"
    try:
        deadline = time.monotonic() + 90
        while "host dashboard ready" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        if sig is None:
            streaming = threading.Event()
            threading.Thread(target=stream_long, args=(port, streaming), daemon=True).start()
            assert streaming.wait(60)
            done.set()  # (a read in progress would keep the terminal open)
            reader.join(5)
            os.close(master)
            master = -1
        else:
            proc.send_signal(sig)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        done.set()
        if master >= 0:
            os.close(master)
    said = log.read_text()
    assert "host stopped" in said
    if sig is None:
        assert "cancelled at the deadline" in said  # the grace ran out: its timer ran
    assert b"Traceback" not in screen


def read_all(fd: int, into: bytearray, done: threading.Event) -> None:
    with contextlib.suppress(OSError):
        while not done.is_set():
            if select.select([fd], [], [], 0.1)[0]:
                if not (chunk := os.read(fd, 65536)):
                    return
                into.extend(chunk)


def stream_long(port: int, started: threading.Event) -> None:
    """A reply far longer than the host's grace, streamed until the host ends it."""
    body = {"model": "smollm2-135m", "prompt": "Once upon a time", "max_tokens": 4000,
            "stream": True, "ignore_eos": True}  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/completions"
    with contextlib.suppress(httpx.HTTPError), httpx.stream("POST", url, json=body) as reply:
        for _ in reply.iter_bytes():
            started.set()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_host_dashboard_has_its_own_chat() -> None:
    """Issue 13: the person on the GPU box chats from the dashboard (F6), no second terminal;
    typing `q` in the prompt writes a q, it does not quit."""
    from infertui.tui.screens.chat import ChatScreen
    from infertui.tui.widgets.message import AssistantMessage
    from infertui.tui.widgets.prompt import PromptArea

    settings = host_settings()
    settings.client.max_tokens = 6
    service = build_service(settings)
    app = HostApp(settings, LocalClient(service))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.client is not None, 60)
        await pilot.press("f6")
        assert isinstance(app.screen, ChatScreen)
        await pilot.press("q", "u", "i", "z")
        assert app.is_running and app.screen.query_one(PromptArea).value == "quiz"
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.query(AssistantMessage))
        view = app.screen.query(AssistantMessage).last()
        await until(pilot, lambda: view.stats is not None, 60)
        assert view.stats is not None and view.stats.model == "smollm2-135m"
        assert view.stats.tokens_out > 0
        # issue 37: F7 shows who used the host, from the ledger too: the dashboard's own chat
        await pilot.press("f7")
        users = app.screen.query_one("#users", DataTable)
        await until(pilot, lambda: users.row_count > 0)
        assert "local" in [str(users.get_row_at(n)[0]) for n in range(users.row_count)]
        days = app.screen.query_one("#days", DataTable)  # (a ledger other hosts may share)
        await until(pilot, lambda: days.row_count > 0)
        assert "local" in [str(days.get_row_at(n)[1]) for n in range(days.row_count)]
