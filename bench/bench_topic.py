"""Issue 15's balancing figure: aggregate tokens/s of many clients on a topic served by three
hosts, against the same clients on a topic served by one, on a loopback DHT testnet. Prints
figures.

    .venv/bin/python bench/bench_topic.py [--clients 24] [--tokens 64] [--reps 3]

Each client is a `connect("topic:NAME")` with a bridge of its own, asking one chat at a time
(`ignore_eos`, greedy). The hosts are `infertui host --headless --topic NAME` processes with
`--parallel` slots each. On one machine the three hosts share its cores, so three hosts cannot
decode more than one here: the ratio says what balancing costs, and how evenly it spreads (the
chats each host served). Across machines the same client spreads over three boxes' GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from infertui.core.client import TopicClient, connect
from infertui.core.protocol.common import ChatMessage
from infertui.core.transport.p2p.runtime import start_testnet

ASK = [ChatMessage(role="user", content="Tell me about lighthouses.")]


def start_host(
    name: str, topic: str, bootstrap: str, parallel: int, threads: int
) -> subprocess.Popen[str]:
    env = {**os.environ, "INFERTUI_DATA_DIR": tempfile.mkdtemp(prefix=f"bench-{name}-"),
           "PYTHONUNBUFFERED": "1", "INFERTUI_HOST__HOST_NAME": name,
           "INFERTUI_HOST__PEER_JOB_LIMIT": "4"}  # fmt: skip
    env.pop("INFERTUI_HOST__P2P__ENABLED", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--ctx", "512",
         "--parallel", str(parallel), "--threads", str(threads), "--queue", "256",
         "--bootstrap", bootstrap, "--topic", topic],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if "ready" in line:
            break
    return proc


async def run(hosts: int, args: argparse.Namespace) -> dict[str, object]:
    testnet, bootstrap = await start_testnet()
    topic = f"bench-{hosts}-{time.time_ns()}"
    procs = [
        await asyncio.to_thread(start_host, f"box{i}", topic, bootstrap[0], args.parallel,
                                args.threads)
        for i in range(hosts)
    ]  # fmt: skip
    clients: list[TopicClient] = []
    try:
        for _ in range(args.clients):
            client = await connect(f"topic:{topic}", bootstrap=bootstrap, connect_timeout=60)
            assert isinstance(client, TopicClient)
            clients.append(client)
        for _ in range(600):  # up to a minute for every client to meet every host
            if all(len(c.connected()) == hosts for c in clients):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # a first load report from every host

        async def one(client: TopicClient) -> tuple[str, int]:
            reply = client.chat(ASK, max_tokens=args.tokens, temperature=0, ignore_eos=True)
            await reply.text()
            return reply.host, reply.stats.tokens_out if reply.stats else 0

        rates, spread = [], Counter[str]()
        for _ in range(args.reps):
            begin = time.perf_counter()
            done = await asyncio.gather(*(one(c) for c in clients))
            rates.append(sum(n for _, n in done) / (time.perf_counter() - begin))
            spread.update(host for host, _ in done)
        return {"tps": statistics.median(rates), "spread": dict(sorted(spread.items()))}
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await asyncio.to_thread(proc.wait, 30)
        assert testnet.stdin is not None
        testnet.stdin.close()
        await testnet.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(f"{args.clients} topic clients, {args.tokens}-token chats, {args.parallel} slots and "
          f"{args.threads} threads per host, median of {args.reps} rounds")  # fmt: skip
    one = asyncio.run(run(1, args))
    three = asyncio.run(run(3, args))
    print(f"1 host : {one['tps']:7.1f} t/s  served {one['spread']}")
    print(f"3 hosts: {three['tps']:7.1f} t/s  served {three['spread']}")
    print(f"3 hosts / 1 host: {float(three['tps']) / float(one['tps']):.2f}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
