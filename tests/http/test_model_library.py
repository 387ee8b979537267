"""Issue 36 §3: the host's /api/pull, /api/copy and /api/delete, driven by the official
`ollama` package, over a loopback Hub (tests/library/fake_sources.py); admin-only."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

from ..library.fake_sources import Sources, serve
from ..models import tiny_gguf
from .conftest import HostFactory

REPO = "tiny-org/Tiny-GGUF"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sources]:
    held = Sources()
    held.add_repo_file(REPO, "Tiny-Q4_K_M.gguf", tiny_gguf(tmp_path / "t.gguf", megabytes=4))
    address, server = serve(held)
    monkeypatch.setenv("HF_ENDPOINT", f"http://{address}")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield held
    server.shutdown()
    server.server_close()


async def test_the_ollama_package_pulls_copies_and_deletes_through_the_host(
    start_host: HostFactory, hub: Sources, caplog: pytest.LogCaptureFixture
) -> None:
    host = await start_host()
    library = host.service.library
    client = ollama.AsyncClient(host=host.url)
    try:
        lines = [line async for line in await client.pull(f"hf.co/{REPO}", stream=True)]
        assert lines[0].status == "pulling manifest" and lines[-1].status == "success"
        size = len(hub.repos[REPO]["Tiny-Q4_K_M.gguf"].data)
        assert any(line.completed == line.total == size for line in lines if line.digest)
        pulled = library.get(f"hf.co/{REPO}")
        assert pulled.path.stat().st_size == size
        again = await client.pull(f"hf.co/{REPO}", stream=False)  # all here: nothing fetched
        assert again.status == "success" and hub.sent[pulled.sha256] == size

        with caplog.at_level(logging.INFO, logger="infertui.core.host.service"):
            await client.copy(pulled.name, "team/tiny:prod")
            assert library.get("team/tiny:prod").sha256 == pulled.sha256
            await client.delete(pulled.name)
        assert library.find(pulled.name) is None and library.find("team/tiny:prod")
        said = " ".join(r.getMessage() for r in caplog.records)  # a shared box's trail
        assert f"deleted {pulled.name}" in said and "copied" in said
        with pytest.raises(ollama.ResponseError) as gone:
            await client.delete(pulled.name)
        assert gone.value.status_code == 404

        with pytest.raises(ollama.ResponseError) as missing:  # an error line after the 200
            await client.pull(f"hf.co/{REPO}:Q2_K")
        assert "it has Q4_K_M" in missing.value.error
    finally:
        await client._client.aclose()


async def test_pulls_and_deletes_need_the_admin_key(
    start_host: HostFactory, hub: Sources, caplog: pytest.LogCaptureFixture
) -> None:
    host = await start_host(admin_key="root-key")
    client = ollama.AsyncClient(host=host.url)
    admin = ollama.AsyncClient(host=host.url, headers={"Authorization": "Bearer root-key"})
    try:
        calls = (client.pull(f"hf.co/{REPO}"), client.delete("x"), client.copy("x", "y"))
        with caplog.at_level(logging.INFO, logger="infertui.core.transport.http.access"):
            for call in calls:
                with pytest.raises(ollama.ResponseError) as refused:
                    await call
                assert refused.value.status_code == 401
        refusals = [r.getMessage() for r in caplog.records if "not the admin" in r.getMessage()]
        assert len(refusals) == 3 and "/api/delete" in refusals[1]  # a shared box's trail
        assert hub.sent == {}
        assert (await admin.pull(f"hf.co/{REPO}")).status == "success"
    finally:
        await client._client.aclose()
        await admin._client.aclose()
