"""Issue 36 §5: models between hosts. Host A has a model in its library; host B, which reaches
no hub, pulls it from A over Hyperswarm (`peer:<A's server ID>/<name>`) on the loopback
testnet, through B's /api/pull as the official `ollama` package sends it. Every byte is checked
by the sha256 A published, a partial file resumes where it stopped, bad bytes are refused,
and only the keys A shares with may pull."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest import mock

import ollama
import pytest

from infertui.core.library import Library, parse_name
from infertui.core.library.download import partial_of
from infertui.core.protocol import ErrorKind, InferError
from infertui.core.transport.p2p.ids import public_key
from infertui.core.transport.p2p.peer_pull import PeerPulls
from infertui.core.transport.p2p.sharing import Sharing

from ..conftest import CUT_NAME, Host, HostFactory
from ..library.fake_sources import Sources

pytestmark = pytest.mark.p2p
NAME = CUT_NAME


async def pulled(host: Host, name: str) -> list[dict[str, Any]]:
    client = ollama.AsyncClient(host=host.url)
    try:
        return [dict(event) async for event in await client.pull(name, stream=True)]
    finally:
        await client._client.aclose()


async def two_hosts(start_host: HostFactory, cut_hub: Sources) -> tuple[Host, Host]:
    """A, holding the model and sharing with B; B, started on the same testnet."""
    b_seed = secrets.token_bytes(32)
    a = await start_host(p2p=True, share=[public_key(b_seed)])
    async for _ in a.service.pull_model(NAME):
        pass
    b = await start_host(p2p=True, seed=b_seed, bootstrap=a.bootstrap)
    return a, b


async def test_a_host_pulls_a_model_from_another_and_serves_it(
    start_host: HostFactory, cut_hub: Sources
) -> None:
    a, b = await two_hosts(start_host, cut_hub)
    events = await pulled(b, f"peer:{a.server_id}/{NAME}")
    assert events[0]["status"] == "pulling manifest" and events[-1]["status"] == "success"
    theirs, ours = a.service.library.get(NAME), b.service.library.get(NAME)
    assert ours.sha256 == theirs.sha256 and ours.path.read_bytes() == theirs.path.read_bytes()
    assert ours.origin == f"peer:{a.server_id}/{NAME}"
    client = ollama.AsyncClient(host=b.url)
    try:  # filed under its name there, and served by it here
        reply = await client.generate(NAME, prompt="Hi", options={"num_predict": 2})
        assert reply.eval_count
    finally:
        await client._client.aclose()


async def test_a_cut_pull_resumes_and_bad_bytes_are_refused(
    start_host: HostFactory, cut_hub: Sources
) -> None:
    a, b = await two_hosts(start_host, cut_hub)
    model = a.service.library.get(NAME)
    data = model.path.read_bytes()
    dest = b.service.library.folder_of(parse_name(NAME)) / model.path.name
    dest.parent.mkdir(parents=True)
    partial = partial_of(dest, model.sha256)
    partial.write_bytes(data[: len(data) // 2])  # what a pull cut off half-way left
    offsets: list[int] = []
    pieces = Sharing.pieces

    async def counted(self: Sharing, name: str, file: str, offset: int) -> AsyncIterator[bytes]:
        offsets.append(offset)
        async for piece in pieces(self, name, file, offset):
            yield piece

    with mock.patch.object(Sharing, "pieces", counted):
        await pulled(b, f"peer:{a.server_id}/{NAME}")
    assert offsets == [len(data) // 2]  # only the rest was asked for
    assert b.service.library.get(NAME).path.read_bytes() == data

    await b.service.delete_model(NAME)
    dest.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * (len(data) // 2))  # a partial file that is not the model's
    with pytest.raises(ollama.ResponseError) as refused:
        await pulled(b, f"peer:{a.server_id}/{NAME}")
    assert "sha256" in refused.value.error
    assert b.service.library.find(NAME) is None and not partial.exists()


async def test_only_the_keys_a_host_shares_with_may_pull(
    start_host: HostFactory, cut_hub: Sources
) -> None:
    a, b = await two_hosts(start_host, cut_hub)
    stranger = await start_host(p2p=True, bootstrap=a.bootstrap)  # a key A does not list
    with pytest.raises(ollama.ResponseError) as refused:
        await pulled(stranger, f"peer:{a.server_id}/{NAME}")
    assert "does not share" in refused.value.error
    assert stranger.service.library.find(NAME) is None
    with pytest.raises(ollama.ResponseError) as missing:
        await pulled(b, f"peer:{a.server_id}/no-such:model")
    assert "no model" in missing.value.error


async def test_a_host_pulls_from_the_first_host_on_a_topic_that_shares_the_model(
    start_host: HostFactory, cut_hub: Sources
) -> None:
    b_seed = secrets.token_bytes(32)
    a = await start_host(p2p=True, topics=["team"], share=[public_key(b_seed)])
    async for _ in a.service.pull_model(NAME):
        pass
    b = await start_host(p2p=True, seed=b_seed, bootstrap=a.bootstrap, topics=["team"])
    events = await pulled(b, f"peer:topic:team/{NAME}")
    assert events[-1]["status"] == "success"
    assert b.service.library.get(NAME).origin == f"peer:{a.server_id}/{NAME}"
    with pytest.raises(ollama.ResponseError) as nowhere:  # B itself is not asked
        await pulled(b, "peer:topic:team/no-such:model")
    assert "no host on topic team shares" in nowhere.value.error


async def test_a_host_that_offers_another_model_than_the_one_asked_for_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filed under the name the host sends, a model could take the place of one this host
    serves (`peer:topic:` asks hosts anyone may run): the names must be the same."""

    class Connection:
        async def close(self) -> None:
            pass

    async def sharer(self: PeerPulls, where: str, name: str) -> tuple[str, Any, dict[str, Any]]:
        files = [{"name": "m.gguf", "size": 4, "sha256": "0" * 64}]
        return "y" * 52, Connection(), {"name": "llama3.2:latest", "files": files}

    monkeypatch.setattr(PeerPulls, "_sharer", sharer)
    library = Library(tmp_path / "models")
    with pytest.raises(InferError) as refused:
        await PeerPulls().pull(library, "peer:topic:team/tiny")
    assert refused.value.kind is ErrorKind.BAD_MESSAGE and "llama3.2" in refused.value.message
    assert library.models() == []
