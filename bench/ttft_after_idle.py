"""A request's first milliseconds after an idle pause, beside back to back (issue 38 §1): how
long each server takes to its response head, its first event, its first text and its last
token, on a kept connection (`--fresh`: a new one each request, opened before the pause, as
bench_gpu's rounds do), for the tiny 32k model (one thread, one slot). Prints a table.

    .venv/bin/python bench/ttft_after_idle.py --llama-server PATH [--baseline PATH]
        [--rounds 10] [--pauses 0.5,0] [--tokens 256] [--fresh]

bench_gpu's one-stream rows open each round in a fresh client after ~0.7 s idle, so they pay
this once a round: after a pause the machine's caches are cold, and a host whose request path
is Python pays more for that than one in C++. The servers take turns, each round, so that
they see the same machine.
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

from bench_gpu import (
    CACHE,
    Setup,
    baseline_cli,
    baseline_env,
    in_turn,
    infertui_cmd,
    llama_server_cmd,
    model_id,
    server,
)
from loadgen import Load, body
from make_model import make_model

from infertui.core.engine.upstream.connection import UpstreamClient
from infertui.core.protocol.sse_reader import sse_batches

MARKS = ["head", "first event", "first text", "last token"]


async def one(hop: UpstreamClient, load: Load, nonce: int) -> dict[str, float]:
    """Milliseconds from the request to each of MARKS."""
    start = time.perf_counter()
    marks: dict[str, float] = {}
    async with hop.stream("completions", body(load, 0, nonce)) as reply:
        marks["head"] = time.perf_counter()
        async for batch in sse_batches(reply):
            now = time.perf_counter()
            marks.setdefault("first event", now)
            for chunk in batch:
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    marks.setdefault("first text", now)
                    marks["last token"] = now
    return {key: 1000 * (marks.get(key, start) - start) for key in MARKS}


def _hop(url: str) -> UpstreamClient:
    return UpstreamClient(url + "/v1/", {}, connect_s=10, silent_s=300, keep=1)


async def rounds(
    urls: dict[str, str], models: dict[str, str], args: argparse.Namespace
) -> dict[tuple[str, float], list[dict[str, float]]]:
    hops = {name: _hop(url) for name, url in urls.items()}
    pauses = [float(p) for p in args.pauses.split(",")]
    samples: dict[tuple[str, float], list[dict[str, float]]] = {}
    try:
        for hop in hops.values():
            await hop.connect(1)
        for name, hop in hops.items():  # warm up
            await one(hop, Load(urls[name], models[name], 16, 0.0, 0, {}), 0)
        for r in range(args.rounds):
            for pause in pauses:
                for name, hop in dict(in_turn(hops, r)).items():
                    load = Load(urls[name], models[name], args.tokens, 0.0, 0, {})
                    nonce = int(time.time() * 1000) % 100_000 + r
                    if args.fresh:  # a connection of its own, opened before the pause
                        hop = _hop(urls[name])
                        await hop.connect(1)
                    if not pause:  # back to back: right after a request to the same server
                        await one(hop, load, nonce + 1)
                    await asyncio.sleep(pause)
                    figures = await one(hop, load, nonce)
                    if args.fresh:
                        await hop.aclose()
                    samples.setdefault((name, pause), []).append(figures)
    finally:
        for hop in hops.values():
            await hop.aclose()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", help="llama-server binary to compare with")
    parser.add_argument("--baseline", help="another infertui checkout's package folder")
    parser.add_argument("--rounds", type=int, default=10, help="repetitions (medians)")
    parser.add_argument("--pauses", default="0.5,0", help="seconds idle before each request")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="each request on a new connection, as bench_gpu's rounds",
    )
    args = parser.parse_args()
    model = make_model(CACHE / "tiny-v32000-q4km.gguf", "tiny", 32000)
    setup = Setup(model, 1, 1024, 1, False, ())
    commands = {"infertui": infertui_cmd(setup)}
    if args.baseline:
        baseline = infertui_cmd(setup, baseline_cli(args.baseline))
        commands["baseline"] = [*baseline_env(args.baseline), *baseline]
    if args.llama_server:
        commands["llama-server"] = llama_server_cmd(args.llama_server, setup)
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(server(cmd, logs / f"ttft-after-idle-{name}.log"))
            for name, cmd in commands.items()
        }
        models = {name: model_id(url) for name, url in urls.items()}
        samples = asyncio.run(rounds(urls, models, args))
    on = "a new connection each" if args.fresh else "a kept connection"
    print(f"tiny 32k, one thread, greedy, {args.tokens} tokens on {on}; ms from the request, "
          f"medians of {args.rounds} rounds taken in turns")  # fmt: skip
    print("| server | idle before | " + " | ".join(MARKS) + " |")
    print("|---" * (len(MARKS) + 2) + "|")
    for (name, pause), runs in samples.items():
        cells = " | ".join(f"{statistics.median(r[k] for r in runs):,.1f}" for k in MARKS)
        print(f"| {name} | {pause:g} s | {cells} |")


if __name__ == "__main__":
    main()
