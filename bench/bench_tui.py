"""What the chat app costs while it streams: tokens/s and client CPU per token, UI vs no UI.

    .venv/bin/python bench/bench_tui.py [--tokens 256] [--threads 2] [--reps 3]

plain: core/client reads the reply (what `infertui ask` does, minus printing).
app:   the real ClientApp (headless, 100x30) sends the same prompt and renders the reply,
       its Markdown growing at most once a frame (message.FRAME_S).
app, a frame per token: the same with FRAME_S = 0, as Textual's MarkdownStream does when it
       keeps up (what the app did before pacing).
Both talk to `infertui host --headless --http` in its own process over 127.0.0.1, greedy,
each figure from a fresh client process. tok/s is measured as the tokens arrive in the client
(a UI that blocks its event loop delays them); CPU is the client process's, per token.
Headless Textual composes every frame but writes no terminal output.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_http import MESSAGES, start_host

from infertui.core.client import connect
from infertui.core.config import Settings
from infertui.core.protocol.common import ChatMessage
from infertui.tui.app import ClientApp
from infertui.tui.widgets import message
from infertui.tui.widgets.message import AssistantMessage


async def plain(url: str, tokens: int) -> dict[str, float]:
    async with await connect(url) as client:
        messages = [ChatMessage.model_validate(m) for m in MESSAGES]
        await client.chat(messages, max_tokens=4).text()
        cpu = time.process_time()
        reply = client.chat(messages, max_tokens=tokens, temperature=0)
        await reply.text()
        cpu = time.process_time() - cpu
    assert reply.stats is not None
    n = reply.stats.tokens_out
    return {"tps": reply.stats.tokens_per_s, "cpu_ms": 1000 * cpu / n, "tokens": n}


async def app(url: str, tokens: int) -> dict[str, float]:
    settings = Settings(client={"max_tokens": tokens, "temperature": 0})
    ui = ClientApp(url, settings)
    async with ui.run_test(size=(100, 30)) as pilot:
        while ui.client is None:
            await pilot.pause(0.05)
        prompt = ui.screen.query_one("#prompt")
        cpu = time.process_time()
        prompt.value = MESSAGES[0]["content"]  # type: ignore[attr-defined]
        await pilot.press("enter")
        # Await the reply's worker; polling with pilot.pause would force a refresh per call.
        (reply,) = [w for w in ui.workers if w.group == "reply"]
        await reply.wait()
        cpu = time.process_time() - cpu
        stats = ui.screen.query(AssistantMessage).last().stats
    assert stats is not None
    return {"tps": stats.tokens_per_s, "cpu_ms": 1000 * cpu / stats.tokens_out,
            "tokens": stats.tokens_out}  # fmt: skip


FACES = {
    "plain": "no UI (core/client)",
    "app": "chat app",
    "unpaced": "chat app, frame/token",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", choices=FACES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.one:
        if args.one == "unpaced":
            message.FRAME_S = 0
        run = plain if args.one == "plain" else app
        print(json.dumps(asyncio.run(run(args.url, args.tokens))))
        return
    host, url = start_host(1, args.threads)
    try:
        results: dict[str, list[dict[str, float]]] = {face: [] for face in FACES}
        for _ in range(args.reps):
            for face in results:
                out = subprocess.run(
                    [sys.executable, __file__, "--one", face, "--url", url,
                     "--tokens", str(args.tokens)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                results[face].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        host.terminate()
        host.wait(30)
    print(f"bundled model, {args.threads} threads, greedy reply of up to {args.tokens} tokens "
          f"over HTTP, median of {args.reps} fresh client processes")  # fmt: skip
    base = {k: statistics.median(r[k] for r in results["plain"]) for k in ("tps", "cpu_ms")}
    for face, label in FACES.items():
        tps = statistics.median(r["tps"] for r in results[face])
        cpu = statistics.median(r["cpu_ms"] for r in results[face])
        tokens = statistics.median(r["tokens"] for r in results[face])
        print(f"  {label:<22} {tps:6.1f} tok/s ({tps / base['tps']:.1%})   "
              f"client CPU {cpu:5.2f} ms/token   ({tokens:.0f} tokens)")  # fmt: skip


if __name__ == "__main__":
    main()
