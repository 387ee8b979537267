"""Issue 13's errors that help, from the client's side: addresses as people paste them, a
missing key told from a wrong one (and no retrying either), and a server that is not
infertui said in words, never as "None"."""

from __future__ import annotations

import asyncio

import pytest

from infertui.app.ask import ask
from infertui.core.client import ConnectionState, Reconnector, connect, explain
from infertui.core.client.connect import as_target
from infertui.core.config import Settings
from infertui.core.protocol.errors import ErrorKind, InferError

from .conftest import HostFactory


@pytest.mark.parametrize(
    ("pasted", "target"),
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("gpu-box:8080", "http://gpu-box:8080"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("127.0.0.1:8080/v1", "http://127.0.0.1:8080"),  # (a walkthrough found it refused)
        ("gpu-box:8080/v1/", "http://gpu-box:8080"),
        ("gpu-box:8080/other", "gpu-box:8080/other"),  # not a base URL: refused as no target
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1/ ", "http://127.0.0.1:8080"),
        ("https://box.example/v1", "https://box.example"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("yryyryyryyryyryyryyryyryyryyryyryyryyryyryyryyryyrya", "yryyryyryyryyryyryyryyryyryyryyryyryyryyryyryyryyrya"),
    ],
)  # fmt: skip
def test_addresses_are_taken_as_people_paste_them(pasted: str, target: str) -> None:
    assert as_target(pasted) == target


async def test_a_server_that_is_not_infertui_is_said_so(
    not_infertui: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InferError) as caught:
        await connect(not_infertui)
    said = explain(caught.value)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION  # final: not retried
    assert "not as an infertui host" in said and "None" not in said, said
    assert "reach" not in said  # it was reached (a helper's audit: "Could not reach the host")
    assert await ask(not_infertui, "hello", Settings()) == 1
    err = capsys.readouterr().err
    assert "not as an infertui host" in err and "None" not in err, err
    # the chat app says so once and stops: it retried forever, "Could not connect"
    states: list[ConnectionState] = []
    await asyncio.wait_for(Reconnector(not_infertui, states.append).run(), 10)
    assert [s.phase for s in states] == ["connecting", "closed"]
    assert states[-1].message.startswith(not_infertui)
    assert "not as an infertui host" in states[-1].message


@pytest.mark.model
async def test_pasted_host_port_and_v1_urls_reach_the_host(start_host: HostFactory) -> None:
    host = await start_host()
    port = host.server.url.rsplit(":", 1)[1]
    for pasted in (f"127.0.0.1:{port}", f"{host.server.url}/v1"):
        client = await connect(pasted)
        assert client.info.address == host.server.url
        assert client.info.models == ("smollm2-135m",)
        await client.close()


@pytest.mark.model
async def test_a_missing_key_is_told_from_a_wrong_one_and_neither_is_retried(
    start_host: HostFactory,
) -> None:
    host = await start_host(api_key="sekrit")
    for key, words in ((None, "no API key was given"), ("wrong", "refused the API key")):
        with pytest.raises(InferError) as caught:
            await connect(host.server.url, api_key=key)
        assert caught.value.kind is ErrorKind.UNAUTHORIZED
        assert words in explain(caught.value)
        states: list[ConnectionState] = []
        reconnector = Reconnector(host.server.url, states.append, api_key=key)
        await asyncio.wait_for(reconnector.run(), 10)  # returns: no retry loop
        assert [s.phase for s in states] == ["connecting", "closed"]
        assert words in states[-1].message
    client = await connect(host.server.url, api_key="sekrit")  # the right key gets in
    assert client.info.models == ("smollm2-135m",)
    await client.close()
