"""`infertui connect` where no retry can help: a target that is no address at all, or a host
that refuses the client's key. It says why in one line and exits 1, as `ask` does, instead
of opening a chat that can never connect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from infertui.core.client import ConnectionState
from infertui.core.config import Settings
from infertui.tui.app import ClientApp, run_client_app

from ..conftest import until


def test_a_target_that_is_no_address_is_refused_before_the_app_opens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_client_app("htp://foo", Settings()) == 1
    err = capsys.readouterr().err
    assert err.startswith("infertui: ") and err.count("\n") == 1
    assert "server ID" in err


@pytest.fixture
async def keyed_host() -> AsyncIterator[str]:
    """A server on 127.0.0.1 that answers every request as a host with an API key does
    to a client without one."""
    body = b'{"error":{"message":"missing API key","code":"unauthorized"}}'

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_a_host_that_refuses_the_key_ends_the_app_saying_why(keyed_host: str) -> None:
    app = ClientApp(keyed_host, Settings())
    async with app.run_test() as pilot:
        await until(pilot, lambda: not app.is_running, 20)
    assert app.return_code == 1
    assert app.refusal is not None and "API key" in app.refusal


class _Recording(ClientApp):
    """The chat app, noting each phase of its connection."""

    phases: list[str]

    def set_connection(self, state: ConnectionState) -> None:
        self.phases.append(state.phase)
        super().set_connection(state)


async def test_reconnect_tries_again_after_a_refusal_that_stopped_the_tries(
    not_infertui: str,
) -> None:
    """Refused for good after it had connected (a host restarted with another key), the app
    stays, saying why; Ctrl+R then tries again (it did nothing: the tries had ended)."""
    app = _Recording(not_infertui, Settings())
    app.phases = []
    app.connected_once = True  # as after a first connection: a refusal does not end the app
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.phases == ["connecting", "closed"])
        assert "not as an infertui host" in app.connection.message
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.phases == ["connecting", "closed"] * 2)
        assert app.connection.phase == "closed" and app.is_running
