"""What a request costs the front host in CPU time, in front of an upstream that answers at
once: the steady figure under issue 15's hop TTFT, which moves by milliseconds from burst to
burst where this moves by a few percent. Prints figures.

    .venv/bin/python bench/bench_front_cpu.py [--bursts 40] [--rounds 3] [--tokens 4,64]
        [--baseline PYTHONPATH]   # a second front, another version of infertui, side by side

One upstream (`instant_upstream.py --delay-ms 0`) and a front per version (`--upstream`, 64 at a
time), each sent bursts of 32 streamed `/v1/completions` in turn, on kept connections. A front's
CPU time (user and system, from /proc) over a round, divided by its requests: the median of
`--rounds`. It counts everything the front does for a request, the kernel's socket work
included, and nothing of the clients' or the upstream's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_gpu import CACHE, baseline_env, server
from bench_upstream import front_cmd
from loadgen import Load, body

from infertui.core.engine.upstream.connection import UpstreamClient
from infertui.core.protocol.sse_reader import sse_batches

BURST = 32


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def stream(hop: UpstreamClient, load: Load, i: int) -> None:
    async with hop.stream("completions", body(load, i, i)) as reply:
        if reply.status_code != 200:
            await reply.aread()
            raise RuntimeError(f"{reply.status_code}: {reply.text[:200]}")
        async for _ in sse_batches(reply):
            pass


async def one_round(fronts: list[tuple[str, int]], tokens: int, bursts: int) -> list[float]:
    """Milliseconds of each front's CPU per request over `bursts` bursts each, in turn."""
    hops = [
        UpstreamClient(url + "/v1", {}, connect_s=5, silent_s=30, keep=BURST) for url, _ in fronts
    ]
    for hop in hops:
        await hop.connect(BURST)
    load = Load("", "up", tokens, 0.0, 0, {})
    used = [0.0] * len(fronts)
    try:
        for k in range(bursts):
            for j, (hop, (_, pid)) in enumerate(zip(hops, fronts, strict=True)):
                before = cpu_seconds(pid)
                await asyncio.gather(*(stream(hop, load, k * BURST + i) for i in range(BURST)))
                await asyncio.sleep(0.01)  # the front's last replies' ends: this burst's
                used[j] += cpu_seconds(pid) - before
    finally:
        for hop in hops:
            await hop.aclose()
    return [1000 * u / (bursts * BURST) for u in used]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=40, help="bursts of 32 per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", default="4,64", help="tokens per stream, one row each")
    parser.add_argument("--baseline", metavar="PYTHONPATH")
    args = parser.parse_args()
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    instant = Path(__file__).with_name("instant_upstream.py")
    with ExitStack() as stack:
        up_cmd = [sys.executable, str(instant), "--port", "{port}", "--delay-ms", "0"]
        upstream = stack.enter_context(server(up_cmd, logs / "upstream.log"))
        versions = {"this checkout": []} | (
            {"baseline": baseline_env(args.baseline)} if args.baseline else {}
        )
        fronts = []
        for name, env in versions.items():
            cmd = [*env, *front_cmd(upstream, BURST * 2)]
            url = stack.enter_context(server(cmd, logs / f"front-{name.split()[0]}.log"))
            fronts.append((url, listening_pid(url)))
        asyncio.run(one_round(fronts, 4, 3))  # warm: connections, first-use imports
        print(f"front CPU per request (ms), bursts of {BURST}, medians of {args.rounds} rounds")
        for tokens in map(int, args.tokens.split(",")):
            rounds = [
                asyncio.run(one_round(fronts, tokens, args.bursts)) for _ in range(args.rounds)
            ]
            figures = [statistics.median(r[j] for r in rounds) for j in range(len(fronts))]
            line = " | ".join(f"{name} {f:.3f}" for name, f in zip(versions, figures, strict=True))
            ratio = f" ({figures[0] / figures[1]:.3f} of the baseline)" if len(figures) > 1 else ""
            print(f"{tokens:>4} tokens: {line}{ratio}")


def listening_pid(url: str) -> int:
    """The pid of the server process that listens at `url`: its command line names the port
    (infertui's `--http 127.0.0.1:PORT`, llama-server's `--port PORT`)."""
    listen = url.removeprefix("http://")
    port = listen.rpartition(":")[2].encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if listen.encode() in argv or any(
                a == b"--port" and b == port for a, b in itertools.pairwise(argv)
            ):
                return int(entry.name)
    raise RuntimeError(f"no server process listens at {url}")


if __name__ == "__main__":
    main()
