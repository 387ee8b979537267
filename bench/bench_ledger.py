"""What the usage ledger costs: tokens/s at 64 streams with the ledger on against off, side by
side in one run (issue 37: goal >= 0.98).

    .venv/bin/python bench/bench_ledger.py [--streams 64] [--tokens 32] [--rounds 7]

Two `infertui host --headless` processes on the tiny random-weight model (bench/make_model.py,
32k vocabulary, one thread, `--parallel STREAMS`), one keeping the ledger (the default) and
one with `INFERTUI_HOST__LEDGER__ENABLED=false`; rounds of STREAMS concurrent completions
(bench/loadgen.py) alternate between them, so that the noise of a shared box falls on both.
Short replies make the per-job record as large a share of the work as it gets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import httpx
from bench_api import start_host  # bench/ is this script's folder: on sys.path
from loadgen import Load, measure
from make_model import make_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    model = make_model(work / "tiny-32k.gguf", "tiny", 32000)
    hosts = {}
    for mode, enabled in (("on", "true"), ("off", "false")):
        env = {**os.environ, "INFERTUI_DATA_DIR": str(work / f"data-{mode}"),
               "INFERTUI_HOST__LEDGER__ENABLED": enabled}  # fmt: skip
        hosts[mode] = start_host(1, args.streams, "--model", str(model), env=env)
    figures: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for _ in range(args.rounds):
            for mode, (_, url) in hosts.items():
                load = Load(url, "default", args.tokens, 0.8, 0, {})
                figures[mode].append(measure(load, args.streams, 1, 2)["tps"])
        usage = httpx.get(f"{hosts['on'][1]}/v1/host/usage", timeout=30).json()
        records = sum(day["jobs"] for day in usage["days"])
    finally:
        for proc, _ in hosts.values():
            proc.terminate()
            proc.wait(30)
    on, off = statistics.median(figures["on"]), statistics.median(figures["off"])
    rounds = {mode: ", ".join(f"{x:.0f}" for x in runs) for mode, runs in figures.items()}
    print(
        f"tiny 32k model, 1 thread, {args.streams} streams x {args.tokens} tokens, "
        f"{args.rounds} rounds each, alternating\n"
        f"  ledger off  {off:8.0f} tok/s   (rounds: {rounds['off']})\n"
        f"  ledger on   {on:8.0f} tok/s   (rounds: {rounds['on']})\n"
        f"  on / off    {on / off:8.3f}        (goal >= 0.98; {records} jobs recorded)"
    )


if __name__ == "__main__":
    main()
