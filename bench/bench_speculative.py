"""Speculative decoding (issue 38 §2): a task that quotes and edits a given text, on the
bundled model, at 1, 2, 8 and 32 streams; infertui with and without its guesses, and
llama-server from the same llama.cpp without and with its own prompt lookup
(`--spec-type ngram-simple`), side by side in one run.

    .venv/bin/python bench/bench_speculative.py --llama-server /tmp/lbuild/bin/llama-server
        [--streams 1,2,8,32] [--rounds 3] [--many-rounds 1]

Each stream asks (chat, temperature 0, repeat penalty 1, no ignore_eos) to repeat one of a
few passages with one word changed. All servers run at once and take turns, round by round.
Figures: aggregate completion tokens/s over the wall clock (the median of `--rounds`, of
`--many-rounds` from 32 streams on), whether each server's greedy texts with guesses are
the texts without, and whether infertui's texts without guesses are the same every round
(batched streams' near ties may break either way: then neither side is "the" text).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import time

import httpx
from bench_api import start_host  # bench/ is this script's folder: on sys.path

from infertui.core.engine.bundled import bundled_model_path

PASSAGES = [
    ("fox", "cat", "The quick brown fox jumps over the lazy dog. It was a bright cold day in "
     "April, and the clocks were striking thirteen. Winston Smith, his chin nuzzled into his "
     "breast in an effort to escape the vile wind, slipped quickly through the glass doors "
     "of Victory Mansions."),
    ("subtotal", "net", "def total_price(items, tax_rate):\n    subtotal = 0\n    for item "
     "in items:\n        subtotal += item.price * item.quantity\n    tax = subtotal * "
     "tax_rate\n    return subtotal + tax\n"),
    ("river", "canal", "The river runs through the old town, under seven stone bridges, past "
     "the market and the cathedral. In spring the river rises and the boatmen wait on the "
     "quay until the water is calm enough to carry their loads."),
    ("train", "bus", "The last train leaves the station at eleven. Passengers who miss the "
     "train sleep in the waiting room, where a stove burns all night and the clerk sells "
     "tea and bread to anyone who asks."),
]  # fmt: skip


def ask(i: int) -> list[dict[str, str]]:
    old, new, text = PASSAGES[i % len(PASSAGES)]
    return [{"role": "user", "content": f"Repeat the following text exactly, but replace "
             f"'{old}' with '{new}':\n\n{text}"}]  # fmt: skip


# llama-server with libgomp's defaults, as it runs alone (importing infertui set openmp.py's)
PLAIN_ENV = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llama_server(
    exe: str, parallel: int, threads: int, *flags: str
) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-m", str(bundled_model_path()), "-np", str(parallel), "-c", str(parallel * 1024),
         "--host", "127.0.0.1", "--port", str(port), "-t", str(threads), "-tb", str(threads),
         "-ngl", "0", "--no-repack", "--no-webui", *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, env=PLAIN_ENV,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("llama-server did not start")


async def one_round(url: str, streams: int, tokens: int) -> tuple[float, list[str]]:
    async with httpx.AsyncClient(timeout=600) as client:

        async def one(i: int) -> tuple[int, str]:
            # repeat_penalty 1: the bundled model's card asks 1.1, which infertui applies
            # where a request is silent and llama-server does not (it would not quote then)
            body = {"model": "default", "messages": ask(i), "max_tokens": tokens,
                    "temperature": 0.0, "repeat_penalty": 1.0}  # fmt: skip
            reply = (await client.post(f"{url}/v1/chat/completions", json=body)).json()
            return reply["usage"]["completion_tokens"], reply["choices"][0]["message"]["content"]

        start = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(streams)))
        wall = time.perf_counter() - start
    return sum(n for n, _ in done) / wall, [text for _, text in done]


def measure(
    urls: dict[str, str], streams: list[int], rounds: int, many_rounds: int, tokens: int
) -> dict:
    """Each server's rates at each number of streams, the servers taking turns round by
    round (the machine's swings then reach them all alike). A short round at each number
    of streams warms every server up first: the first round at a new batch size ran
    slower for all of them (82 against 130 tokens/s at 8 streams, 96-117 against 168 at 32)."""
    out: dict[str, dict[int, tuple]] = {name: {} for name in urls}
    for n in streams:
        for url in urls.values():
            asyncio.run(one_round(url, n, 16))
        results: dict[str, list] = {name: [] for name in urls}
        for _ in range(rounds if n < 32 else many_rounds):
            for name, url in urls.items():
                results[name].append(asyncio.run(one_round(url, n, tokens)))
        for name, got in results.items():
            rates = [r[0] for r in got]
            steady = all(texts == got[0][1] for _, texts in got)  # the same every round
            out[name][n] = (statistics.median(rates), rates, got[0][1], steady)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", help="llama-server binary to compare with")
    parser.add_argument("--streams", default="1,2,8,32")
    parser.add_argument("--rounds", type=int, default=3, help="below 32 streams")
    parser.add_argument("--many-rounds", type=int, default=1, help="at 32 streams and more")
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    parallel = max(streams)
    ctx = ("--ctx", "1024")  # per slot, as llama-server's -c below
    servers = {
        "infertui": lambda: start_host(args.threads, parallel, *ctx, "--no-speculative"),
        "infertui+guesses": lambda: start_host(args.threads, parallel, *ctx, "--speculative"),
    }
    if args.llama_server:
        exe = args.llama_server
        servers["llama-server"] = lambda: start_llama_server(exe, parallel, args.threads)
        servers["llama-server+ngram"] = lambda: start_llama_server(
            exe, parallel, args.threads, "--spec-type", "ngram-simple"
        )
    procs, urls = [], {}
    try:
        for name, start in servers.items():
            proc, urls[name] = start()
            procs.append(proc)
        results = measure(urls, streams, args.rounds, args.many_rounds, args.tokens)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    print(f"bundled model, quote and edit, greedy, {args.tokens} tokens at most, "
          f"{args.threads} threads; tokens/s, median of {args.rounds} rounds "
          f"({args.many_rounds} at 32 streams and more)")  # fmt: skip
    names = list(results)
    print("| streams | " + " | ".join(names) + " | guesses / none (infertui) | same text |"
          " infertui's own rounds agree |"
          + (" ngram / none (llama-server) | same text | infertui+guesses / llama-server+ngram |"
             if args.llama_server else ""))  # fmt: skip
    print("|---" * (len(names) + 4 + (3 if args.llama_server else 0)) + "|")
    for n in streams:
        cells = [f"{results[k][n][0]:,.0f} ({', '.join(f'{r:.0f}' for r in results[k][n][1])})"
                 for k in names]  # fmt: skip
        on, off = results["infertui+guesses"][n], results["infertui"][n]
        row = [*cells, f"{on[0] / off[0]:.2f}x", same(on[2], off[2]), str(off[3])]
        if args.llama_server:
            lon, loff = results["llama-server+ngram"][n], results["llama-server"][n]
            row += [f"{lon[0] / loff[0]:.2f}x", same(lon[2], loff[2]), f"{on[0] / lon[0]:.2f}x"]
        print(f"| {n} | " + " | ".join(row) + " |")
    sample = results["infertui+guesses"][streams[0]][2][0]
    print(f"\nfirst reply with guesses: {sample[:200]!r}")


def same(with_guesses: list[str], without: list[str]) -> str:
    """True, or how many replies differ: where streams batch, a near tie may break either
    way with or without guesses (the rounds of one server show whether it does so alone)."""
    differ = sum(a != b for a, b in zip(with_guesses, without, strict=True))
    return "True" if not differ else f"{differ} of {len(without)} differ"


if __name__ == "__main__":
    main()
