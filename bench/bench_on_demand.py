"""Issue 36's on-demand figure: the first token of a request that names a library model not
loaded (the host loads it, then answers), against that model's plain load (an admin's
POST /engines) plus the first token of a request once it is warm. Prints medians and the
ratio; the difference is what loading on demand adds (the library lookup, the memory
estimate, the queue's wait for the load) and what any first request after a load costs
(also printed: the plain load's own first request).

    .venv/bin/python bench/bench_on_demand.py [--model PATH] [--rounds 5] [--threads 2]

One `infertui host --headless --http` process on 127.0.0.1 (bundled model pinned), with a
model folder that holds a link to --model (default: the bundled GGUF), served by its stem.
Rounds alternate the two ways, so the page cache favours neither.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from bench_api import start_host  # bench/ is this script's folder: on sys.path

from infertui.core.engine import bundled_model_path

ADMIN = "bench-admin"
ASK = {"prompt": "Name a colour.", "options": {"num_predict": 1, "temperature": 0}}


def first_token_s(client: httpx.Client, model: str, **extra: object) -> float:
    """Seconds from sending a streamed /api/generate to its first line of text."""
    start = time.perf_counter()
    with client.stream("POST", "/api/generate", json={"model": model, **ASK, **extra}) as got:
        for line in got.iter_lines():
            if json.loads(line).get("response"):
                return time.perf_counter() - start
    raise RuntimeError(f"no text from {model}")


def unloaded(client: httpx.Client, model: str) -> None:
    while any(m["name"] == model for m in client.get("/api/ps").json()["models"]):
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=bundled_model_path())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-on-demand-"))
    folder = work / "models"
    folder.mkdir()
    (folder / "ondemand.gguf").symlink_to(args.model.resolve())
    env = {**os.environ, "INFERTUI_DATA_DIR": str(work / "data"),
           "INFERTUI_HOST__MODEL_DIRS": json.dumps([str(folder)])}  # fmt: skip
    proc, url = start_host(args.threads, 4, "--admin-key", ADMIN, env=env)
    on_demand, loads, cold, warm = [], [], [], []
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        with httpx.Client(base_url=url, timeout=300, headers=admin) as client:
            for _ in range(args.rounds):
                on_demand.append(first_token_s(client, "ondemand", keep_alive=0))
                unloaded(client, "ondemand")
                start = time.perf_counter()
                added = client.post(
                    "/engines", json={"engine_id": "plain", "model_path": str(args.model)}
                )
                added.raise_for_status()
                loads.append(time.perf_counter() - start)
                cold.append(first_token_s(client, "plain"))  # its first request
                warm.append(first_token_s(client, "plain"))
                client.delete("/engines/plain").raise_for_status()
    finally:
        proc.terminate()
        proc.wait(30)
    a, b, c, d = (statistics.median(x) * 1000 for x in (on_demand, loads, warm, cold))
    size = args.model.stat().st_size / 2**20
    print(f"{args.model.name} ({size:,.0f} MiB), {args.threads} threads, {args.rounds} rounds, "
          "medians:")  # fmt: skip
    print(f"  first token, loaded on demand      {a:8.0f} ms")
    print(f"  plain load + a warm first token    {b + c:8.0f} ms  ({b:.0f} + {c:.0f})")
    print(f"  on demand / plain                  {a / (b + c):8.2f}")
    print(
        f"  (plain load + its cold first token {b + d:8.0f} ms: on demand / that {a / (b + d):.2f})"
    )


if __name__ == "__main__":
    main()
