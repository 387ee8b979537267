"""`infertui ask`: the answer on stdout for scripts, NDJSON with --json, one line on error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from ..conftest import ServedHost, SharedHost, over_p2p, wait_until

pytestmark = pytest.mark.model


async def ask(
    *args: str, stdin: str | None = None, data: Path, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infertui.app.cli", "ask", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "INFERTUI_DATA_DIR": str(data), **(env or {})},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def host(shared_host: SharedHost, request: pytest.FixtureRequest) -> ServedHost:
    """The shared host (tests/conftest.py, SharedHosts), on Hyperswarm too for a test marked p2p; a test marked `fresh_host` gets its own."""
    return await shared_host(p2p=over_p2p(request, default=False))


async def test_the_answer_streams_to_stdout(host: ServedHost, tmp_path: Path) -> None:
    code, out, err = await ask(
        host.url, "Name three colours.", "--max-tokens", "8", "--temperature", "0", data=tmp_path
    )
    assert code == 0, err
    assert out.strip() and out.endswith("\n")
    assert err == ""


async def test_a_reply_cut_by_the_settings_limit_says_so_on_stderr(
    host: ServedHost, tmp_path: Path
) -> None:
    """A max_tokens from the settings (the chat's Ctrl+O saves one) cut a script's reply
    without a word (a helper's walkthrough); asked for with --max-tokens, it says nothing."""
    limit = {"INFERTUI_CLIENT__MAX_TOKENS": "5"}
    story = "Write a long story about the sea."
    code, out, err = await ask(host.url, story, "--temperature", "0", data=tmp_path, env=limit)
    assert code == 0 and out.strip(), err
    assert "stopped at 5 tokens" in err and "--max-tokens" in err and err.count("\n") == 1
    code, out, err = await ask(host.url, story, "--max-tokens", "5", data=tmp_path, env=limit)
    assert code == 0 and out.strip() and err == ""


@pytest.mark.p2p
async def test_json_prints_ndjson_events_over_hyperswarm(host: ServedHost, tmp_path: Path) -> None:
    code, out, err = await ask(
        host.server_id, "Write a long story about the sea.", "--json", "--max-tokens", "8",
        "--temperature", "0", "--bootstrap", host.bootstrap[0], data=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert {e["event"] for e in events[:-1]} == {"chunk"}
    end = events[-1]
    assert end["event"] == "end" and end["finish_reason"] == "length" and end["tokens_out"] == 8
    assert all(e["request_id"] == end["request_id"] for e in events)


@pytest.mark.deterministic
async def test_a_dash_reads_the_prompt_from_stdin(host: ServedHost, tmp_path: Path) -> None:
    """The piped text is the prompt: the reply is the one that text gets when typed. (A short
    sampled reply may be only whitespace, so the test compares rather than looks for words.
    The host is deterministic: the typed prompt is read afresh, not on the piped one's cells.)"""
    flags = ("--max-tokens", "6", "--temperature", "0")
    code, out, err = await ask(host.url, "-", *flags, stdin="Hello", data=tmp_path)
    assert code == 0, err
    typed_code, typed, _ = await ask(host.url, "Hello", *flags, data=tmp_path)
    assert typed_code == 0
    assert out == typed and out.endswith("\n") and len(out) > 1


@pytest.mark.deterministic
async def test_a_question_and_piped_text_make_one_prompt(host: ServedHost, tmp_path: Path) -> None:
    """`git diff | infertui ask ID "A commit message for:" -`: the parts, joined by a blank
    line, are the prompt; the reply is the one that prompt gets typed whole (on a
    deterministic host, which reads the second prompt afresh, not on the first's cells)."""
    question, piped = "Repeat the word after the colon:", "lighthouse"
    flags = ("--max-tokens", "8", "--temperature", "0", "--json")
    code, out, err = await ask(host.url, question, "-", *flags, stdin=piped, data=tmp_path)
    assert code == 0, err
    whole_code, whole, _ = await ask(host.url, f"{question}\n\n{piped}", *flags, data=tmp_path)
    assert whole_code == 0

    def reply(ndjson: str) -> tuple[str, int]:
        events = [json.loads(line) for line in ndjson.splitlines()]
        return "".join(e["text"] for e in events if e["event"] == "chunk"), events[-1]["tokens_in"]

    assert reply(out) == reply(whole)
    assert reply(out)[1] > 10  # both parts reached the host


async def test_an_error_is_one_line_and_exit_1(tmp_path: Path) -> None:
    code, out, err = await ask("http://127.0.0.1:9", "hi", data=tmp_path)
    assert code == 1 and out == ""
    assert err.startswith("infertui: No host is answering") and err.count("\n") == 1
    code, out, err = await ask("http://127.0.0.1:9", "hi", "--json", data=tmp_path)
    assert code == 1 and json.loads(out)["code"] == "HOST_OFFLINE"


async def test_a_malformed_server_id_is_refused_before_any_network(tmp_path: Path) -> None:
    code, _, err = await ask("not-an-id", "hi", data=tmp_path)
    assert code == 1 and "not a server ID" in err


@pytest.mark.fresh_host
async def test_ctrl_c_aborts_on_the_host_and_exits_130(host: ServedHost, tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infertui.app.cli", "ask", host.url, "Write a long story.",
        "--max-tokens", "400", "--temperature", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "INFERTUI_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.stdout is not None
    await asyncio.wait_for(proc.stdout.read(20), 60)  # the answer is streaming
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, err
    await wait_until(lambda: host.busy_slots() == 0)  # once the host sees the client leave
    (metrics,) = host.service.metrics()
    assert metrics.cancelled == 1 and metrics.completed == 0  # stopped on the host, not finished


@pytest.mark.fresh_host
async def test_a_reader_that_stops_reading_ends_the_reply_quietly(
    host: ServedHost, tmp_path: Path
) -> None:
    """`infertui ask ... | head -1`: once the reader has what it wants and closes its end,
    the reply is aborted on the host and `ask` exits as a process SIGPIPE ends, without the
    traceback it printed."""
    read, write = os.pipe()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "infertui.app.cli", "ask", host.url, "Write a long story.",
        "--max-tokens", "400", "--temperature", "0",
        stdout=write, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "INFERTUI_DATA_DIR": str(tmp_path)},
    )  # fmt: skip
    os.close(write)
    assert await asyncio.wait_for(asyncio.to_thread(os.read, read, 20), 60)  # streaming
    os.close(read)  # as `head` does once it has its line
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 141, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
    await wait_until(lambda: host.busy_slots() == 0)
    (metrics,) = host.service.metrics()
    assert metrics.cancelled == 1 and metrics.completed == 0


async def test_ps_with_no_host_there_names_the_address_it_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`infertui ps` asks http://127.0.0.1:8080 when TARGET is left out: an audit read only
    "No host is answering at that address", with no address in sight."""
    from infertui.app.ps import ps
    from infertui.core.config import Settings

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert await ps(url, Settings()) == 1
    assert url in capsys.readouterr().err
