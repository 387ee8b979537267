"""`infertui host --headless`: logs `ready`, exits 0 on SIGTERM or Ctrl-C (issue 2 §5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.model


def start_host(*flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--parallel", "1", *flags],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def wait_for(proc: subprocess.Popen[str], needle: str, timeout: float = 60) -> list[str]:
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} in:\n{''.join(lines)}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_headless_host_logs_ready_and_exits_cleanly(sig: signal.Signals) -> None:
    proc = start_host()
    try:
        wait_for(proc, "ready")
        proc.send_signal(sig)
        rest = proc.communicate(timeout=30)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "shutting down" in rest
    assert "host stopped" in rest


def test_sighup_neither_kills_nor_stops_a_headless_host() -> None:
    """Issue 14 §7: a closed SSH session (SIGHUP) leaves a headless host serving; SIGTERM
    still drains and exits 0."""
    import httpx

    proc = start_host("--no-p2p", "--http", "127.0.0.1:0")
    try:
        lines = wait_for(proc, "ready")
        url = next(line.split("http on ")[1].split()[0] for line in lines if "http on " in line)
        proc.send_signal(signal.SIGHUP)
        wait_for(proc, "SIGHUP ignored")
        reply = httpx.post(
            f"{url.rstrip(',')}/v1/completions",
            json={"model": "default", "prompt": "Hello", "max_tokens": 3},
            timeout=30,
        )
        assert reply.status_code == 200 and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        proc.kill()
    assert proc.returncode == 0 and "host stopped" in rest, rest


def test_headless_host_reports_a_bad_model_file_and_exits_non_zero(tmp_path) -> None:
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    proc = start_host("--model", str(bogus))
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1
    assert "is not a GGUF file" in err
    assert "Traceback" not in err


def test_parallel_auto_sizes_the_slots_from_free_memory_and_says_so() -> None:
    """`--parallel auto` (issue 10 §3): a clear size, with what bound it, then ready."""
    proc = start_host("--no-p2p", "--parallel", "auto", "--ctx", "512")
    try:
        lines = wait_for(proc, "ready")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    sized = [line for line in lines if "--parallel auto:" in line]
    assert sized, "".join(lines)
    assert "slots x 512 tokens" in sized[0] and "MiB free" in sized[0]
    # and where the engine runs: the device (on a GPU, layers offloaded and VRAM), its memory
    placed = [line for line in lines if "CPU (" in line or "GPU " in line]
    assert placed and "MiB" in placed[0], "".join(lines)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--parallel", "100000"), "llama.cpp's 256 sequences per context"),
        (("--parallel", "256", "--ctx", "3000000"), "MiB is free"),
    ],
    ids=["beyond llama.cpp", "beyond memory"],
)
def test_an_oversized_parallel_is_a_clear_error_not_a_crash(
    flags: tuple[str, ...], says: str
) -> None:
    proc = start_host("--no-p2p", *flags)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 1, err
    assert says in err
    assert "Traceback" not in err


def _anon_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _settled_anon_mb(pid: int) -> float:
    """RssAnon once it holds still: a reload answers before the old engine is closed in the
    background, so a reading at once may or may not count it."""
    last = _anon_mb(pid)
    for _ in range(20):
        time.sleep(0.5)
        now = _anon_mb(pid)
        if abs(now - last) < 1.0:
            return now
        last = now
    return last


def test_reloads_give_the_old_models_memory_back() -> None:
    """The fuzz run grew the host by 127 MB: every reload left the old model's freed heap
    in glibc's arenas. Unloading now trims them (issue 12 §6). Measured in a host process of
    its own: in the test process, other tests' leftovers counted as growth."""
    import httpx

    proc = start_host("--no-p2p", "--http", "127.0.0.1:0")
    try:
        lines = wait_for(proc, "ready")
        url = next(line.split("http on ")[1].split()[0] for line in lines if "http on " in line)
        reload = f"{url.rstrip(',')}/v1/pools/smollm2-135m/reload"
        for _ in range(3):  # first-use buffers and the allocator's arenas settle
            assert httpx.post(reload, json={}, timeout=60).status_code == 200
        before = _settled_anon_mb(proc.pid)
        for _ in range(6):
            assert httpx.post(reload, json={}, timeout=60).status_code == 200
        grown = _settled_anon_mb(proc.pid) - before
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert grown < 20, f"{grown:.0f} MB more after 6 reloads"


def test_a_port_in_use_is_said_before_any_model_loads() -> None:
    """On a big model the load takes minutes; the port was found taken only after it."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        proc = start_host("--no-p2p", "--http", f"127.0.0.1:{port}")
        _, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err
    assert " loaded " not in err and "loading" not in err.lower(), err


async def test_a_host_that_cannot_load_its_model_gives_its_port_back(tmp_path: Path) -> None:
    """The port is taken before the models load; a model that cannot load must not leave it
    taken (it stayed open until the collector found the socket)."""
    import socket

    from infertui.app.host import build_service
    from infertui.core.config import Settings
    from infertui.core.protocol import InferError

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    settings = Settings.model_validate(
        {"host": {"models": [str(tmp_path / "nope.gguf")], "p2p": {"enabled": False},
                  "http": {"listen": f"127.0.0.1:{port}"}}}
    )  # fmt: skip
    service = build_service(settings)
    with pytest.raises(InferError, match=r"nope\.gguf"):
        await service.start()
    again = socket.socket()
    try:
        again.bind(("127.0.0.1", port))  # free again: no SO_REUSEADDR needed for a closed one
    finally:
        again.close()


def test_a_second_signal_stops_at_once_without_waiting_out_the_grace() -> None:
    """The first SIGTERM gives running replies their grace (here 60 s); a second one, as
    uvicorn and llama-server take it, cancels them and the host exits at once."""
    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--parallel", "1",
         "--no-p2p", "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "INFERTUI_HOST__DRAIN_ON_STOP_MS": "60000"},
    )  # fmt: skip
    try:
        lines = wait_for(proc, "ready")
        url = next(line.split("http on ")[1].split()[0] for line in lines if "http on " in line)
        body = {"model": "default", "prompt": "Once", "max_tokens": 900, "ignore_eos": True,
                "stream": True}  # fmt: skip
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as reply:
            lines = reply.iter_lines()
            next(line for line in lines if line.startswith("data: {"))  # under way
            proc.send_signal(signal.SIGTERM)
            wait_for(proc, "draining (deadline 60000 ms, 1 job)")
            proc.send_signal(signal.SIGTERM)
            rest = proc.communicate(timeout=20)[1]
            told = [line for line in lines if line.startswith("data: ")]
    finally:
        proc.kill()
    assert proc.returncode == 0, rest
    assert "stopping now" in rest and "1 cancelled at the deadline" in rest, rest
    assert told[-1] == "data: [DONE]" and "the host stopped this reply" in "".join(told)
