"""A conversation as a person has one: turn after turn of one chat, each turn sending the whole
history (the host reads only what is new, from its prompt cache), for hosts side by side on
one model. Prints each turn's context, time to first token and decode tokens/s per host.

    .venv/bin/python bench/bench_chat_turns.py [--model PATH] [--turns 8] [--tokens 128] \\
        [--threads 2] [--rounds 3] [--host NAME=FLAGS ...] [--llama-server PATH]

`--host` runs `infertui host` with extra flags under a name (repeatable; default: the host's
defaults beside `--flash-attn off`). Greedy replies of exactly `--tokens` tokens (ignore_eos),
so that every host decodes the same lengths; the hosts take turns, turn by turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))

from bench_gpu import CACHE, Setup, infertui_cmd, llama_server_cmd, server

from infertui.core.engine import bundled_model_path
from infertui.core.engine.llama.devices import gpus

ASKS = [
    "Tell me about the history of tea.", "How is green tea made?", "And black tea?",
    "Which countries grow the most?", "What about tea in Britain?", "How do I brew oolong?",
    "Is tea healthy?", "Summarise what we talked about.", "Any famous tea ceremonies?",
    "Thanks! One last fact?",
]  # fmt: skip


def turn(
    client: httpx.Client, model: str, history: list[dict[str, str]], tokens: int
) -> tuple[float, float, int, str]:
    """(seconds to the first token, decode tokens/s after it, prompt tokens, reply)."""
    body = {
        "model": model, "messages": history, "max_tokens": tokens, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    start = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    usage: dict[str, int] = {}
    with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        for line in reply.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                if text := (choice.get("delta") or {}).get("content"):
                    first = first or time.perf_counter()
                    parts.append(text)
    end = time.perf_counter()
    out = usage.get("completion_tokens", len(parts))
    rate = (out - 1) / (end - first) if first and end > first else 0.0
    return first - start, rate, usage.get("prompt_tokens", 0), "".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="conversations per host (medians)")
    parser.add_argument("--host", action="append", default=[], metavar="NAME=FLAGS")
    parser.add_argument("--llama-server", help="also llama-server, at its defaults")
    args = parser.parse_args()
    model = args.model or bundled_model_path()
    if any("=" not in h for h in args.host):
        parser.error("--host takes NAME=FLAGS, e.g. fa-off='--flash-attn off'")
    hosts = dict(h.split("=", 1) for h in args.host)
    hosts = hosts or {"default": "", "fa-off": "--flash-attn off"}
    setup = Setup(model, 1, 4096, args.threads, bool(gpus()), ())
    commands = {name: infertui_cmd(setup) + shlex.split(flags) for name, flags in hosts.items()}
    if args.llama_server:
        commands["llama-server"] = llama_server_cmd(args.llama_server, setup)  # its default
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[int, list[tuple[float, float, int]]]] = {n: {} for n in commands}
    with contextlib.ExitStack() as stack:
        urls = {
            n: stack.enter_context(server(c, logs / f"chat-{n}.log")) for n, c in commands.items()
        }
        clients = {
            n: stack.enter_context(httpx.Client(base_url=u, timeout=600)) for n, u in urls.items()
        }
        models = {n: c.get("/v1/models").json()["data"][0]["id"] for n, c in clients.items()}
        for _ in range(args.rounds):
            histories: dict[str, list[dict[str, str]]] = {n: [] for n in commands}
            for k in range(args.turns):
                for name, client in clients.items():
                    history = histories[name]
                    history.append({"role": "user", "content": ASKS[k % len(ASKS)]})
                    ttft, rate, prompt, reply = turn(client, models[name], history, args.tokens)
                    history.append({"role": "assistant", "content": reply})
                    figures[name].setdefault(k, []).append((ttft, rate, prompt))
    names = list(commands)
    print(f"{model.name}, {args.threads} threads, greedy {args.tokens}-token replies, medians "
          f"of {args.rounds} conversations; per host: TTFT ms / decode tokens/s")  # fmt: skip
    print("| turn | prompt tokens | " + " | ".join(names) + " | " +
          " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")  # fmt: skip
    print("|" + "---|" * (2 + 2 * len(names) - 1))
    for k in range(args.turns):
        med = {n: tuple(statistics.median(x[j] for x in figures[n][k]) for j in range(3))
               for n in names}  # fmt: skip
        cells = [f"{1000 * med[n][0]:,.0f} / {med[n][1]:,.1f}" for n in names]
        base = med[names[0]][1] or float("nan")
        ratios = [f"{med[n][1] / base:.2f}" for n in names[1:]]
        print(f"| {k + 1} | {med[names[0]][2]:,.0f} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
