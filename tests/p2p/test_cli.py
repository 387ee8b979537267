"""The real command line over P2P: `infertui id` and `infertui host --headless --bootstrap`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.model


def cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def infertui_id(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "infertui.app.cli", "id"], env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


async def test_infertui_id_is_stable_and_reachable_through_the_headless_host(
    testnet, connect, tmp_path
) -> None:
    env = {**os.environ, "INFERTUI_DATA_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("INFERTUI_HOST__P2P__ENABLED")  # this test's host listens, on the loopback testnet
    first, again = [await asyncio.to_thread(infertui_id, env) for _ in range(2)]
    assert first == again and len(first) == 52
    assert oct((tmp_path / "host-key.seed").stat().st_mode & 0o777) == "0o600"

    host = cli("host", "--headless", "--parallel", "1", "--bootstrap", testnet[0], env=env)
    try:
        assert host.stderr is not None
        announced = False
        while not announced:
            line = await asyncio.to_thread(host.stderr.readline)
            assert line, "the host exited"
            announced = f"announced as {first}" in line
        client = await connect(first)
        assert client.server_info.model == "smollm2-135m"
        assert await client.chat(prompt="Hello", max_tokens=3).text() is not None
    finally:
        host.terminate()
        host.communicate(timeout=30)
    assert host.returncode == 0
