"""Issue 36 §1-2: `infertui pull` from the Hub, Ollama's registry and a URL, through the real
client code against a loopback server that speaks those protocols (tests/library/fake_sources.py);
the sha256 checked before a file is filed, resumes, a full disk, two pulls sharing one
download; and the library's list, show, rm and cp."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infertui.app.cli import main
from infertui.core.library import Library, parse_name, pull
from infertui.core.library import download as download_module
from infertui.core.library.sources import quant_of
from infertui.core.protocol.errors import ErrorKind, InferError

from ..models import tiny_gguf
from .fake_sources import Blob, Sources, serve

REPO = "tiny-org/Tiny-GGUF"


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Sources, str]]:
    """The loopback Hub and registry, with a repository of two quantisations; HF_ENDPOINT
    and the data dir point the real code at them."""
    held = Sources()
    made = tmp_path / "made"
    made.mkdir()
    held.add_repo_file(REPO, "Tiny-Q4_K_M.gguf", tiny_gguf(made / "a.gguf", file_type=15))
    held.add_repo_file(REPO, "Tiny-Q8_0.gguf", tiny_gguf(made / "b.gguf", file_type=7))
    address, server = serve(held)
    monkeypatch.setenv("HF_ENDPOINT", f"http://{address}")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("INFERTUI_DATA_DIR", str(tmp_path / "data"))
    yield held, address
    server.shutdown()
    server.server_close()


@pytest.fixture
def library(tmp_path: Path) -> Library:
    return Library(tmp_path / "data" / "models")


def test_names_parse_as_ollama_and_the_hub_name_them() -> None:
    assert parse_name("llama3.2").full == "registry.ollama.ai/library/llama3.2:latest"
    assert parse_name("llama3.2:1b").short == "llama3.2:1b"
    assert parse_name("me/mine:v2").short == "me/mine:v2"
    local = parse_name("127.0.0.1:5000/library/tiny:1b")
    assert (local.host, local.namespace, local.model, local.tag) == (
        "127.0.0.1:5000", "library", "tiny", "1b")  # fmt: skip
    hub = parse_name("hf.co/Org/Repo-GGUF")
    assert (hub.source, hub.repo, hub.tag) == ("hf", "Org/Repo-GGUF", "Q4_K_M")
    assert parse_name("https://example.com/m/Tiny-Q8_0.gguf").short == "tiny-q8_0:latest"
    assert parse_name("hf.co/Org/Repo:q8_0").tag == "Q8_0"  # as the Hub's file names spell it
    assert parse_name("hf.co/Org/Repo:latest").tag == "Q4_K_M"  # as Ollama lists it
    for bad in ("a/b/c/d", "bad name", "https://example.com/notes.txt", "x:ta g", "../x/y",
                "a/../b", "..:1/x/y"):  # fmt: skip
        with pytest.raises(InferError) as caught:
            parse_name(bad)
        assert caught.value.kind is ErrorKind.INVALID_PARAMS


def test_quantisations_are_read_from_file_names() -> None:
    assert quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_of("model.IQ3_XS-00001-of-00003.gguf") == "IQ3_XS"
    assert quant_of("tiny-f16.gguf") == "F16"
    assert quant_of("README.gguf") is None


def test_a_hub_pull_takes_the_default_quantisation_checks_it_and_lists_it(
    sources: tuple[Sources, str], library: Library, capsys: pytest.CaptureFixture[str]
) -> None:
    held, _ = sources
    events: list[dict[str, object]] = []
    model = pull(library, f"hf.co/{REPO}", progress=events.append)
    assert model.name == "hf.co/tiny-org/Tiny-GGUF:Q4_K_M"
    assert model.sha256 == held.repos[REPO]["Tiny-Q4_K_M.gguf"].sha256
    assert model.path.read_bytes() == held.repos[REPO]["Tiny-Q4_K_M.gguf"].data
    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    fetching = [e for e in events if "digest" in e]
    assert fetching[-1]["completed"] == fetching[-1]["total"] == model.size
    assert [m.name for m in library.models()] == [model.name]

    assert main(["list"]) == 0
    table = capsys.readouterr().out
    assert "hf.co/tiny-org/Tiny-GGUF:Q4_K_M" in table and "Q4_K_M" in table and "2048" in table
    assert main(["show", f"hf.co/{REPO}:Q4_K_M"]) == 0
    shown = capsys.readouterr().out
    assert "llama" in shown and "apache-2.0" in shown and model.sha256 in shown


def test_a_split_gguf_is_pulled_whole_under_its_own_file_names(
    sources: tuple[Sources, str], library: Library, tmp_path: Path
) -> None:
    held, _ = sources
    parts = [tiny_gguf(tmp_path / f"p{i}.gguf", megabytes=1 + i) for i in (1, 2)]
    for i, part in enumerate(parts, 1):
        held.add_repo_file("o/Split", f"Split-Q4_K_M-0000{i}-of-00002.gguf", part)
    model = pull(library, "hf.co/o/Split")
    assert model.path.name == "Split-Q4_K_M-00001-of-00002.gguf"
    second = model.path.with_name("Split-Q4_K_M-00002-of-00002.gguf")
    assert second.read_bytes() == parts[1].read_bytes()
    assert model.size == sum(p.stat().st_size for p in parts)


def test_a_missing_quantisation_names_the_ones_there_are_and_leaves_nothing(
    sources: tuple[Sources, str], library: Library
) -> None:
    with pytest.raises(InferError) as caught:
        pull(library, f"hf.co/{REPO}:Q2_K")
    assert caught.value.kind is ErrorKind.MODEL_NOT_FOUND
    assert "no Q2_K GGUF; it has Q4_K_M, Q8_0" in caught.value.message
    with pytest.raises(InferError) as missing:
        pull(library, "hf.co/nobody/Nothing")
    assert missing.value.kind is ErrorKind.MODEL_NOT_FOUND
    assert "set HF_TOKEN" in missing.value.message
    assert library.models() == [] and not any(library.root.rglob("*.gguf*"))


def test_a_gated_repository_asks_for_a_token_and_opens_with_it(
    sources: tuple[Sources, str], library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, _ = sources
    held.gated[REPO] = "hf_secret"
    with pytest.raises(InferError) as caught:
        pull(library, f"hf.co/{REPO}:Q8_0")
    assert caught.value.kind is ErrorKind.UNAUTHORIZED and "HF_TOKEN" in caught.value.message
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert pull(library, f"hf.co/{REPO}:Q8_0").name.endswith(":Q8_0")


def test_a_registry_pull_keeps_the_template_and_params_layers(
    sources: tuple[Sources, str], library: Library, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    held, address = sources
    weights = tiny_gguf(tmp_path / "r.gguf").read_bytes()
    params = {"temperature": 0.3, "stop": ["<|end|>"]}
    held.add_manifest("library/tiny:1b", [
        ("model", weights), ("template", b"{{ .Prompt }}"),
        ("params", json.dumps(params).encode()), ("license", b"MIT licence text"),
    ])  # fmt: skip
    name = f"{address}/library/tiny:1b"
    with pytest.raises(InferError) as secure:  # https by default, as Ollama's
        pull(library, name)
    assert secure.value.kind is ErrorKind.CONNECT_FAILED
    model = pull(library, name, insecure=True)
    assert model.path.read_bytes() == weights and model.name == name
    assert model.layers["params"] == params and model.layers["template"] == "{{ .Prompt }}"
    assert main(["show", name]) == 0
    assert "temperature 0.3" in capsys.readouterr().out
    with pytest.raises(InferError) as unknown:
        pull(library, f"{address}/library/tiny:70b", insecure=True)
    assert unknown.value.kind is ErrorKind.MODEL_NOT_FOUND


def test_a_corrupted_byte_is_refused_and_leaves_nothing(
    sources: tuple[Sources, str], library: Library
) -> None:
    held, _ = sources
    held.corrupt = True
    with pytest.raises(InferError) as caught:
        pull(library, f"hf.co/{REPO}")
    assert caught.value.kind is ErrorKind.DIGEST_MISMATCH and "refused" in caught.value.message
    assert library.models() == [] and not any(library.root.rglob("*.gguf*"))
    held.corrupt = False
    assert pull(library, f"hf.co/{REPO}").sha256 is not None  # and a good copy is taken


def test_a_cut_download_resumes_where_it_stopped(
    sources: tuple[Sources, str], library: Library
) -> None:
    held, _ = sources
    blob = held.repos[REPO]["Tiny-Q4_K_M.gguf"]
    held.cut_after = 1 << 20
    with pytest.raises(InferError) as caught:
        pull(library, f"hf.co/{REPO}")
    assert caught.value.kind is ErrorKind.CONNECT_FAILED and "resume" in caught.value.message
    assert library.models() == []
    model = pull(library, f"hf.co/{REPO}")
    assert model.path.read_bytes() == blob.data
    assert held.sent[blob.sha256] == len(blob.data)  # every byte sent once


def test_a_pull_killed_mid_file_resumes_from_its_partial_file(
    sources: tuple[Sources, str], library: Library, tmp_path: Path
) -> None:
    """The `infertui pull` process is killed (SIGKILL: no cleanup of its own) while the file
    comes slowly; the next pull fetches only the rest."""
    held, _ = sources
    big = held.add_repo_file(
        "o/Big", "Big-Q4_K_M.gguf", tiny_gguf(tmp_path / "big.gguf", megabytes=24)
    )
    held.throttle_s = 0.01  # per 64 KiB: ~4 s for the file
    process = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "pull", "hf.co/o/Big"],
        env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    partial = library.root / f"hf.co/o/Big/Q4_K_M/Big-Q4_K_M.gguf.{big.sha256[:16]}.partial"
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 2 << 20):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    kept = partial.stat().st_size
    assert 0 < kept < len(big.data)
    held.throttle_s = 0.0
    model = pull(library, "hf.co/o/Big")
    assert model.path.read_bytes() == big.data
    assert held.sent[big.sha256] - kept < len(big.data)  # the rest, not the whole again


def test_a_full_disk_is_said_before_a_byte_is_fetched(
    sources: tuple[Sources, str], library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, _ = sources

    class Full:
        free = 10 << 20

    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda path: Full)
    with pytest.raises(InferError) as caught:
        pull(library, f"hf.co/{REPO}")
    assert caught.value.kind is ErrorKind.NO_SPACE and "GB free" in caught.value.message
    assert held.sent == {}


def test_two_pulls_of_one_model_share_one_download(
    sources: tuple[Sources, str], library: Library
) -> None:
    held, _ = sources
    blob = held.repos[REPO]["Tiny-Q4_K_M.gguf"]
    held.throttle_s = 0.002
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(pull(library, f"hf.co/{REPO}")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 2
    assert held.sent[blob.sha256] == len(blob.data)


def test_a_url_pull_checks_a_given_sha256(sources: tuple[Sources, str], library: Library) -> None:
    held, address = sources
    blob = held.repos[REPO]["Tiny-Q8_0.gguf"]
    url = f"http://{address}/cdn/{blob.sha256}?name=x"
    with pytest.raises(InferError):  # a URL must name a .gguf file
        pull(library, url)
    url = f"http://{address}/{REPO}/resolve/main/Tiny-Q8_0.gguf"
    with pytest.raises(InferError) as caught:
        pull(library, url, sha256="0" * 64)
    assert caught.value.kind is ErrorKind.DIGEST_MISMATCH and library.models() == []
    model = pull(library, url, sha256=blob.sha256)
    assert model.name == "tiny-q8_0:latest" and model.sha256 == blob.sha256


def test_copy_and_remove_by_name_and_folder_models_are_listed_not_removed(
    sources: tuple[Sources, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    tiny_gguf(folder / "own-model.gguf", megabytes=0.5)
    library = Library(tmp_path / "data" / "models", [folder])
    model = pull(library, f"hf.co/{REPO}")
    mine = library.copy("own-model", "own-model:kept")  # a folder's GGUF, filed by name
    assert mine.removable and library.remove("own-model:kept").name == "own-model:kept"
    copied = library.copy(model.name, "team/tiny:prod")
    assert copied.name == "team/tiny:prod"
    assert copied.path.stat().st_ino == model.path.stat().st_ino  # a link, not a copy
    assert {m.name for m in library.models()} == {model.name, "team/tiny:prod", "own-model"}
    library.remove(model.name)
    assert library.get("team/tiny:prod").path.read_bytes()  # the other name keeps the file
    with pytest.raises(InferError) as refused:
        library.remove("own-model")
    assert refused.value.kind is ErrorKind.FORBIDDEN
    assert main(["rm", "nothing-here"]) == 1
    assert "no model nothing-here" in capsys.readouterr().err


def test_a_repull_after_the_source_changed_replaces_the_file(
    sources: tuple[Sources, str], library: Library, tmp_path: Path
) -> None:
    """The registry's `model.gguf` of a newer version: the file filed before is not taken for
    it (it was verified for the old digest), and the old version's partial is never resumed."""
    held, address = sources
    old = tiny_gguf(tmp_path / "old.gguf", megabytes=1).read_bytes()
    new = tiny_gguf(tmp_path / "new.gguf", megabytes=2).read_bytes()
    name = f"{address}/library/tiny:latest"
    held.add_manifest("library/tiny:latest", [("model", old)])
    assert pull(library, name, insecure=True).path.read_bytes() == old
    held.add_manifest("library/tiny:latest", [("model", new)])
    model = pull(library, name, insecure=True)
    assert model.path.read_bytes() == new and model.sha256 == Blob(new).sha256


def test_a_server_that_ignores_range_is_read_whole_again(
    sources: tuple[Sources, str], library: Library
) -> None:
    held, _ = sources
    blob = held.repos[REPO]["Tiny-Q4_K_M.gguf"]
    held.cut_after = 1 << 20
    with pytest.raises(InferError):
        pull(library, f"hf.co/{REPO}")
    held.ignore_range = True
    assert pull(library, f"hf.co/{REPO}").path.read_bytes() == blob.data
    assert held.sent[blob.sha256] == (1 << 20) + len(blob.data)
