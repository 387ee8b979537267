"""Streaming over Hyperswarm vs in-process, on a loopback DHT testnet (issue 4). Prints figures.

    .venv/bin/python bench/bench_p2p.py [--tokens 64] [--threads 2] [--reps 3]

in-process: the Pool/Job path in one process (bench_http.inproc).
p2p:        `infertui host --headless --bootstrap <testnet>` in its own process; a P2PClient
            in this one connects by server ID over two Node bridges and the loopback DHT.
Every figure comes from fresh processes; TTFT is measured from sending chat_start.
With --client-nice N the client and its bridge run at that niceness: on a 2-core machine they
otherwise take their CPU from llama.cpp's threads, which a client on a laptop would not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_http import MESSAGES, TTFT_RUNS, compare, inproc, measure

from infertui.core.protocol.common import ChatMessage
from infertui.core.transport.p2p.client import P2PClient
from infertui.core.transport.p2p.ids import load_seed, server_id
from infertui.core.transport.p2p.runtime import start_testnet


async def p2p(concurrency: int, tokens: int, threads: int, nice: int = 0) -> dict[str, object]:
    testnet, bootstrap = await start_testnet()
    assert testnet.stdin is not None
    data = tempfile.mkdtemp(prefix="bench-p2p-")
    host_env = {**os.environ, "INFERTUI_DATA_DIR": data, "PYTHONUNBUFFERED": "1",
                "INFERTUI_HOST__PEER_JOB_LIMIT": str(concurrency)}  # fmt: skip
    host_env.pop("INFERTUI_HOST__P2P__ENABLED", None)
    os.environ["INFERTUI_DATA_DIR"] = data
    sid = server_id(load_seed())
    host = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--ctx", "512",
         "--parallel", str(concurrency), "--threads", str(threads), "--bootstrap", bootstrap[0]],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=host_env,
    )  # fmt: skip
    assert host.stderr is not None
    while f"announced as {sid}" not in await asyncio.to_thread(host.stderr.readline):
        pass
    if nice:
        os.nice(nice)  # this process and the bridge it spawns next: the client side
    start = time.perf_counter()
    client = await P2PClient.connect(sid, bootstrap=bootstrap)
    connect_ms = (time.perf_counter() - start) * 1000
    messages = [ChatMessage.model_validate(m) for m in MESSAGES]

    async def one(max_tokens: int) -> tuple[float, float, int]:
        begin = time.perf_counter()
        stream = client.chat(messages=messages, max_tokens=max_tokens, temperature=0,
                             ignore_eos=True)  # fmt: skip
        first = last = 0.0
        async for _ in stream:
            last = time.perf_counter()
            first = first or last
        n = stream.end.tokens_out if stream.end and stream.end.tokens_out else 0
        return (first - begin) * 1000, (n - 1) / (last - first) if n > 1 else 0.0, n

    await one(4)
    ttft = [(await one(2))[0] for _ in range(TTFT_RUNS)] if concurrency == 1 else []
    begin = time.perf_counter()
    runs = await asyncio.gather(*(one(tokens) for _ in range(concurrency)))
    wall = time.perf_counter() - begin
    await client.close()
    host.terminate()
    await asyncio.to_thread(host.wait, 30)
    testnet.stdin.close()
    await testnet.wait()
    produced = sum(n for _, _, n in runs)
    return {"ttft": ttft, "per_stream": statistics.median(t for _, t, _ in runs),
            "aggregate": produced / wall, "tokens": produced, "connect_ms": connect_ms}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--client-nice", type=int, default=0, metavar="N")
    parser.add_argument("--one", choices=["inproc", "p2p"], help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        if args.one == "inproc":
            result = asyncio.run(inproc(args.concurrency, args.tokens, args.threads))
        else:
            result = asyncio.run(p2p(args.concurrency, args.tokens, args.threads, args.client_nice))
        print(json.dumps(result))
        return
    print(
        f"bundled model, {args.threads} threads, {args.tokens}-token outputs, loopback testnet, "
        f"median of {args.reps} fresh processes per figure, client nice {args.client_nice}"
    )  # fmt: skip

    def connect_line(runs: list[dict[str, Any]]) -> str:
        connect = statistics.median(r["connect_ms"] for r in runs)
        return f"  connect        {connect:6.1f} ms (client bridge spawn, DHT connect, server_info)"

    nice = ("--client-nice", str(args.client_nice))
    compare(
        "p2p",
        "P2P",
        lambda face, n: measure(__file__, face, n, args, *nice),
        args.reps,
        connect_line,
    )


if __name__ == "__main__":
    main()
