"""Where one stream's CPU time goes (issue 38 §1): per completion token, the wall clock, the
server's CPU time (its busiest thread, the one that decodes, and all its others) and the
client's; infertui and llama-server taking turns on the tiny 32k model (one thread, one slot),
beside llama.cpp's own decode (`llama-batched-bench`, one sequence). Prints a table.

    .venv/bin/python bench/cpu_per_token.py --llama-server PATH --batched-bench PATH
        [--rounds 5] [--tokens 256] [--temps 0,0.8]

Everything shares this machine's cores, as in bench_gpu's one-stream rows: the client is one
stream in this process (loadgen's, on kept connections), its CPU time this process's. A
server's threads are read from /proc (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_front_cpu import listening_pid
from bench_gpu import CACHE, Setup, infertui_cmd, llama_server_cmd, model_id, raw_limit, server
from loadgen import Load, one
from make_model import make_model

from infertui.core.engine.upstream.connection import UpstreamClient

REQUESTS = 3  # streamed one after another per server, temperature and round


def thread_seconds(pid: int) -> dict[int, float]:
    """Each thread's user and system CPU time so far."""
    tick = 100.0  # USER_HZ: /proc reports clock ticks of 1/100 s on Linux
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def streams(url: str, model: str, pid: int, tokens: int, temp: float) -> dict[str, float]:
    """Microseconds per token over REQUESTS streamed requests, one at a time."""
    hop = UpstreamClient(url + "/v1/", {}, connect_s=10, silent_s=300, keep=1)
    await hop.connect(1)
    load = Load(url, model, tokens, temp, 0, {})
    try:
        before, cpu, start = thread_seconds(pid), time.process_time(), time.perf_counter()
        made = 0
        for i in range(REQUESTS):
            made += (await one(hop, load, i, int(start * 1000) % 100_000 + i))[1]
        wall, client = time.perf_counter() - start, time.process_time() - cpu
        after = thread_seconds(pid)
    finally:
        await hop.aclose()
    used = sorted(after[t] - before.get(t, 0.0) for t in after)
    return {
        "tps": made / wall, "wall": 1e6 * wall / made, "decoding thread": 1e6 * used[-1] / made,
        "other threads": 1e6 * sum(used[:-1]) / made, "client": 1e6 * client / made,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", required=True, help="llama-server binary")
    parser.add_argument("--batched-bench", required=True, help="llama-batched-bench binary")
    parser.add_argument("--rounds", type=int, default=5, help="repetitions (medians)")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--temps", default="0,0.8", help="0 is greedy; others add top-p/top-k")
    args = parser.parse_args()
    model = make_model(CACHE / "tiny-v32000-q4km.gguf", "tiny", 32000)
    setup = Setup(model, 1, 1024, 1, False, ())
    commands = {
        "infertui": infertui_cmd(setup),
        "llama-server": llama_server_cmd(args.llama_server, setup),
    }
    temps = [float(t) for t in args.temps.split(",")]
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    samples: dict[tuple[str, float], list[dict[str, float]]] = {}
    raw: list[float] = []
    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(server(cmd, logs / f"cpu-per-token-{name}.log"))
            for name, cmd in commands.items()
        }
        found = {name: (model_id(url), listening_pid(url)) for name, url in urls.items()}
        for name, url in urls.items():  # warm up
            asyncio.run(streams(url, found[name][0], found[name][1], 16, 0.0))
        for _ in range(args.rounds):
            tps = raw_limit(args.batched_bench, setup, [1], args.tokens, 16)[1]["tps"]
            raw.append(1e6 / tps)
            for temp in temps:
                for name, url in urls.items():
                    figures = asyncio.run(streams(url, *found[name], args.tokens, temp))
                    samples.setdefault((name, temp), []).append(figures)
    decode = statistics.median(raw)
    print(f"tiny 32k, one thread, one stream of {args.tokens} tokens; µs per token, medians of "
          f"{args.rounds} rounds; llama.cpp's own decode {decode:.0f} µs ({1e6 / decode:,.0f} "
          "tokens/s)")  # fmt: skip
    keys = ["tps", "wall", "decoding thread", "other threads", "client"]
    print("| server | sampling | " + " | ".join(keys) + " | of raw |")
    print("|---" * (len(keys) + 3) + "|")
    for (name, temp), runs in samples.items():
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        cells = " | ".join(f"{med[k]:,.0f}" for k in keys)
        sampling = "greedy" if temp == 0 else f"temp {temp}"
        print(f"| {name} | {sampling} | {cells} | {decode / med['wall']:.2f} |")


if __name__ == "__main__":
    main()
