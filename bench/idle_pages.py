"""Why the first token after an idle pause costs a Python host more (issue 38 §1): what this
machine charges for each page touched after idling, and how many pages one request touches
in each server. Prints two tables.

    .venv/bin/python bench/idle_pages.py [--llama-server PATH] [--rounds 5]

First, the machine alone: a 64 MiB buffer, touched once, is read again after each pause, one
byte in each of 1,024 pages, then 4,096 cache lines inside 64 pages. Then each server (the
tiny 32k model, one thread, one slot): the kernel's referenced bits are cleared after a
pause (/proc/PID/clear_refs), one greedy request of one token is served, and the process's
referenced kilobytes (smaps) say how much memory that request touched, weights included.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_gpu import CACHE, Setup, infertui_cmd, llama_server_cmd, model_id, server
from loadgen import Load
from make_model import make_model
from ttft_after_idle import _hop, one

PAGE, LINE = 4096, 64


def touch_costs(pauses: list[float], rounds: int) -> list[tuple[float, float, float]]:
    """(pause, µs for 1,024 pages, µs for 4,096 lines in 64 pages), medians of `rounds`."""
    buffer = np.ones(64 << 20, dtype=np.uint8)
    buffer[::PAGE] += 1
    rows = []
    for pause in pauses:
        pages, lines = [], []
        for r in range(rounds):
            base = (r % 8) << 23  # 8 MiB apart: each round reads memory it has not just read
            time.sleep(pause)
            began = time.perf_counter()
            int(buffer[base : base + (1024 * PAGE) : PAGE].sum())
            middle = time.perf_counter()
            int(buffer[base + (4 << 20) : base + (4 << 20) + 64 * PAGE : LINE].sum())
            pages.append(1e6 * (middle - began))
            lines.append(1e6 * (time.perf_counter() - middle))
        rows.append((pause, statistics.median(pages), statistics.median(lines)))
    return rows


def referenced_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Referenced:"):
            return int(line.split()[1])
    raise RuntimeError("no Referenced line in smaps_rollup")


def clear_referenced(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("1")


def server_pid(url: str) -> int:
    port = url.rsplit(":", 1)[1]
    found = subprocess.run(["pgrep", "-f", "--", f"127.0.0.1:{port}|--port {port}"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(found.stdout.split()[0])


async def touched(url: str, model: str, pause: float, rounds: int) -> float:
    """kB the process touched serving one request after `pause`, the median of `rounds` (its
    time is not taken: clearing the bits makes every page's next touch dearer)."""
    pid, hop = server_pid(url), _hop(url)
    load = Load(url, model, 1, 0.0, 0, {})
    kbs = []
    try:
        await hop.connect(1)
        for r in range(rounds + 1):
            await asyncio.sleep(pause)
            clear_referenced(pid)
            await one(hop, load, int(time.time() * 1000) % 100_000 + r)
            await asyncio.sleep(0.2)  # the request's end (its ledger record, its log line)
            if r:  # the first warms up
                kbs.append(referenced_kb(pid))
    finally:
        await hop.aclose()
    return statistics.median(kbs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", help="llama-server binary to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="repetitions (medians)")
    parser.add_argument("--pause", type=float, default=0.5, help="idle before each request")
    args = parser.parse_args()

    print(f"Reading memory again after a pause (µs, medians of {args.rounds}):")
    print("| idle before | 1,024 pages, a byte each | 4,096 lines in 64 pages |")
    print("|---|---|---|")
    for pause, pages, lines in touch_costs([0.01, 0.1, 0.5, 2.0], args.rounds):
        print(f"| {pause:g} s | {pages:,.0f} | {lines:,.0f} |")

    model = make_model(CACHE / "tiny-v32000-q4km.gguf", "tiny", 32000)
    setup = Setup(model, 1, 1024, 1, False, ())
    commands = {"infertui": infertui_cmd(setup)}
    if args.llama_server:
        commands["llama-server"] = llama_server_cmd(args.llama_server, setup)
    weights_kb = model.stat().st_size >> 10
    print(f"\nOne request of one token after {args.pause:g} s idle, tiny 32k model "
          f"({weights_kb:,} kB of weights), medians of {args.rounds}:")  # fmt: skip
    print("| server | kB touched | 4 KiB pages |")
    print("|---|---|---|")
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name, cmd in commands.items():  # one at a time: the other's pages stay out of it
        with ExitStack() as stack:
            url = stack.enter_context(server(cmd, logs / f"idle-pages-{name}.log"))
            kb = asyncio.run(touched(url, model_id(url), args.pause, args.rounds))
        print(f"| {name} | {kb:,.0f} | {kb / 4:,.0f} |")


if __name__ == "__main__":
    main()
