"""Issue 15's overhead of the upstream hop: tokens/s and TTFT through an infertui host that
serves an upstream server (`--upstream`), against the same streams sent to that server
directly, at 1 and 32 streams. Prints figures.

    .venv/bin/python bench/bench_upstream.py [--streams 1,32] [--reps 3] [--threads 2]
        [--llama-server PATH]   # the upstream: llama-server (else an infertui host)
        [--apart]               # the upstream on CPU 0, the front on CPU 1, the clients on the
                                # rest (with 2 CPUs, the front and the clients share CPU 1)
        [--instant]             # the upstream answers after 200 ms: the hop's own cost alone
        [--baseline PYTHONPATH] # a second front, another version of infertui (build/typed of
                                # an older checkout), side by side

Both servers stay up side by side; each repetition measures direct, then through infertui,
back to back, and the medians over repetitions are compared (bench/loadgen.py drives the
streams: `/v1/completions`, `ignore_eos`, counted from the server's usage). Tokens/s comes from
`--reps` runs of `--tokens`; TTFT from `--ttft-reps` runs of 4 tokens, since at 32 streams the
upstream's own first steps move by ±100 ms from run to run and only many pairs tell a few
milliseconds apart. On one machine the
front host's own work shares the cores with the upstream's decode, which a real set-up (the
upstream on its own GPU box) does not: the ratio here is a floor. `--apart` gives the upstream
a CPU of its own (`taskset`), as its own machine would, so the front's work delays the upstream
only by the time it takes, not by the CPU it takes from the upstream's decode. The front gets
one too where there are three CPUs or more (a GPU box); on two it shares the other with the
clients.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_gpu import CACHE, baseline_env, server
from loadgen import Load, measure

from infertui.core.engine import bundled_model_path


def upstream_cmd(args: argparse.Namespace, slots: int) -> list[str]:
    if args.instant:
        return [sys.executable, str(Path(__file__).with_name("instant_upstream.py")),
                "--port", "{port}", "--delay-ms", "200"]  # fmt: skip
    model = str(bundled_model_path())
    if args.llama_server:
        return [
            args.llama_server, "-m", model, "-np", str(slots), "-c", str(slots * 512),
            "--host", "127.0.0.1", "--port", "{port}", "-t", str(args.threads), "--no-webui",
            "--no-repack", "-a", "gemma",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--no-p2p",
        "--http", "127.0.0.1:{port}", "--model", f"gemma={model}", "--parallel", str(slots),
        "--ctx", "512", "--threads", str(args.threads), "--queue", "1024",
    ]  # fmt: skip


def front_cmd(upstream: str, slots: int) -> list[str]:
    return [
        sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--no-p2p",
        "--http", "127.0.0.1:{port}", "--upstream", f"up={upstream}/v1",
        "--upstream-concurrency", str(slots), "--queue", "1024",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3, help="runs of --tokens for tokens/s")
    parser.add_argument("--ttft-reps", type=int, default=12, help="short runs for TTFT")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--llama-server", metavar="PATH")
    parser.add_argument("--apart", action="store_true", help="the upstream on a CPU of its own")
    parser.add_argument("--instant", action="store_true", help="an upstream with no work to do")
    parser.add_argument(
        "--baseline", metavar="PYTHONPATH", help="also a front from the infertui found there"
    )
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    slots = max(streams)
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    up_cmd, pin = upstream_cmd(args, slots), []
    if args.apart:
        rest = sorted(os.sched_getaffinity(0) - {0})
        if not rest:
            parser.error("--apart needs two CPUs")
        up_cmd = ["taskset", "-c", "0", *up_cmd]
        # With three CPUs or more the front has one of its own too, as it would on its own
        # machine: a write to a client on its CPU wakes the client, which may take the CPU
        # from the front (~0.1 ms a write on the 2-core box), a cost the upstream, alone on
        # CPU 0, does not pay for its direct replies.
        front_cpus, client_cpus = (rest[:1], rest[1:]) if len(rest) > 1 else (rest, rest)
        pin = ["taskset", "-c", ",".join(map(str, front_cpus))]
        os.sched_setaffinity(0, client_cpus)  # this process and its client workers
    with ExitStack() as stack:
        direct = stack.enter_context(server(up_cmd, logs / "upstream.log"))
        front = stack.enter_context(server([*pin, *front_cmd(direct, slots)], logs / "front.log"))
        fronts = {"through infertui": front}
        if args.baseline:
            cmd = [*pin, *baseline_env(args.baseline), *front_cmd(direct, slots)]
            fronts["through the baseline"] = stack.enter_context(
                server(cmd, logs / "front-baseline.log")
            )
        kind = "instant" if args.instant else "llama-server" if args.llama_server else "infertui"
        where = (
            f" (upstream on CPU 0, front on {','.join(map(str, front_cpus))}, clients on "
            f"{','.join(map(str, client_cpus))})"
            if args.apart
            else ""
        )
        print(f"upstream: {kind} at {direct} ({slots} slots); front: infertui at {front}{where}")
        for n in streams:
            runs = pairs(args, direct, fronts, n, args.tokens, args.reps)
            # TTFT from short runs (4 tokens: only the first steps matter), many of them, each
            # set back to back: the paired differences are the least noisy figure
            short = pairs(args, direct, fronts, n, 4, args.ttft_reps)
            d = statistics.median(r["tps"] for r in runs["direct"])
            td = statistics.median(r["ttft_p50"] * 1000 for r in short["direct"])
            print(f"{n:>3} streams: direct {d:7.1f} t/s, TTFT p50 {td:6.1f} ms")
            for name in fronts:
                v = statistics.median(r["tps"] for r in runs[name])
                tv = statistics.median(r["ttft_p50"] * 1000 for r in short[name])
                gaps = sorted(
                    (b["ttft_p50"] - a["ttft_p50"]) * 1000
                    for a, b in zip(short["direct"], short[name], strict=True)
                )
                print(
                    f"     {name}: {v:7.1f} t/s ({v / d:.3f}) | TTFT p50 {tv:6.1f} ms "
                    f"({tv - td:+.1f}); paired difference median {statistics.median(gaps):+.1f}"
                    f" ms (from {gaps[0]:+.1f} to {gaps[-1]:+.1f}, {len(gaps)} pairs)"
                )


def pairs(
    args: argparse.Namespace, direct: str, fronts: dict[str, str], n: int, tokens: int, reps: int
) -> dict[str, list[dict[str, float]]]:
    """`reps` runs of `n` streams each way, direct then through each front, back to back (the
    fronts in turn first, so that neither always runs longest after its direct pair)."""
    runs: dict[str, list[dict[str, float]]] = {"direct": [], **{name: [] for name in fronts}}
    for rep in range(reps):
        runs["direct"].append(measure(Load(direct, "instant" if args.instant else "gemma",
                                           tokens, 0.0, 0, {}), n, 1, args.processes))  # fmt: skip
        order = list(fronts.items())
        for name, url in order[::-1] if rep % 2 else order:
            runs[name].append(measure(Load(url, "up", tokens, 0.0, 0, {}), n, 1, args.processes))
    return runs


if __name__ == "__main__":
    main()
