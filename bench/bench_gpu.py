"""infertui beside raw llama.cpp and llama-server, on one model and device, in one run.

    .venv/bin/python bench/bench_gpu.py --make 8b:32000 --make 1b:128256 \\
        --llama-server PATH --batched-bench PATH --streams 1,8,32,64,256
    .venv/bin/python bench/bench_gpu.py --make tiny:128256 --threads 1 --streams 64 \\
        --tokens 64 --temps 0,0.8 --llama-server PATH --batched-bench PATH     # the 2-core CPU

Made for GPU boxes (every layer offloaded when the build has CUDA), and it runs on a CPU too.
For each model it measures:

raw          llama.cpp's decode speed at each number of sequences: `llama-batched-bench`'s
             S_TG when given, else a bare ctypes loop of batched decodes (no sampling, no
             server): the physical limit that serving can only approach.
raw+prefill  with `llama-batched-bench`, the same workload end to end: completion tokens over
             its prefill and decode time (T_PP + T_TG). A server's wall clock includes the
             prefill, so this is the ceiling its tokens/s can reach; "raw" counts decoding only.
infertui     `infertui host --http`, streams of `/v1/completions` from bench/loadgen.py.
llama-server the same requests to llama-server from the same llama.cpp, when given.

Every figure is aggregate completion tokens/s over the wall clock (from the common start to
the last token), the median of `--rounds`; TTFT p50 and max beside, and infertui's decode
share: of the time its batch loop had work, the part spent decoding (from /metrics; the
rest is host work, while a GPU idles), and its tokens/s while decoding, prompts included,
beside raw's, which leaves them out (far below raw: llama.cpp itself ran slower in the
host). `--make SHAPE:VOCAB` writes
a random-weight Llama-shaped GGUF (bench/make_model.py) into the cache, so that any machine
can measure without downloads. Long prompts (`--prompts long`) are ~600 tokens with a Llama
vocabulary and ~1,600 with make_model's synthetic one, so that slots hold 2,048 tokens then.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
from loadgen import Load, measure
from make_model import make_model

log = logging.getLogger("bench_gpu")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "infertui" / "bench"
LONG_REPEAT = {"short": 0, "long": 100}  # ~600 prompt tokens for Llama-style vocabularies


@dataclass(frozen=True)
class Setup:
    model: Path
    parallel: int
    ctx: int
    threads: int | None
    gpu: bool
    host_args: tuple[str, ...]
    flash_attn: str | None = None  # for all three; None: llama.cpp's choice, every default

    @property
    def attention(self) -> str:
        """What raw and llama-server run with: as infertui, so that all three run the same
        kernels."""
        return self.flash_attn or "auto"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"{url}: not ready after {timeout:.0f} s")


@contextlib.contextmanager
def server(cmd: list[str], log_path: Path) -> Iterator[str]:
    """Run a server on a free loopback port (substituted for {port}); yield its URL."""
    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in cmd]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def baseline_cli(path: str) -> str:
    """The command line's module in the checkout at `path`: app/ since issue 35, tui/ before."""
    probe = subprocess.run(
        ["env", f"PYTHONPATH={path}", sys.executable, "-c", "import infertui.app.cli"],
        capture_output=True,
    )
    return "infertui.app.cli" if probe.returncode == 0 else "infertui.tui.cli"


def baseline_env(path: str) -> list[str]:
    """The prefix that runs the infertui whose package is in the folder `path` (`build/typed`
    of a checkout, once `make lint` has made it), checked: where no `infertui` package is
    there, Python would import this checkout's, and the baseline would measure this code."""
    found = subprocess.run(
        ["env", f"PYTHONPATH={path}", sys.executable, "-c",
         "import infertui.core; print(infertui.core.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not os.path.abspath(found).startswith(os.path.abspath(path) + os.sep):
        raise SystemExit(f"--baseline {path}: infertui comes from {found}, not from there")
    return ["env", f"PYTHONPATH={path}"]


def infertui_cmd(setup: Setup, cli: str = "infertui.app.cli") -> list[str]:
    cmd = [
        sys.executable, "-m", cli, "host", "--headless", "--no-p2p",
        "--http", "127.0.0.1:{port}", "--model", f"bench={setup.model}",
        "--parallel", str(setup.parallel), "--ctx", str(setup.ctx), "--queue", "1024",
    ]  # fmt: skip
    if setup.threads:
        cmd += ["--threads", str(setup.threads)]
    return cmd + list(setup.host_args)


def llama_server_cmd(exe: str, setup: Setup) -> list[str]:
    cmd = [
        exe, "-m", str(setup.model), "-np", str(setup.parallel),
        "-c", str(setup.parallel * setup.ctx), "--host", "127.0.0.1", "--port", "{port}",
        "-ngl", "99" if setup.gpu else "0", "--no-webui", "-fa", setup.attention,
    ]  # fmt: skip
    if setup.threads:
        cmd += ["-t", str(setup.threads), "-tb", str(setup.threads)]
    if not setup.gpu:
        cmd += ["--no-repack"]  # as infertui loads weights (repacked buffers crash some CPUs)
    return cmd


def raw_limit(
    exe: str | None, setup: Setup, streams: list[int], tokens: int, prompt: int
) -> dict[int, dict[str, float]]:
    """At each batch size, decode tokens/s without sampling or serving ("tps") and, from
    llama-batched-bench, completion tokens/s over prefill and decode together ("serving")."""
    if exe:
        cmd = [
            exe, "-m", str(setup.model), "-c", str(max(streams) * (prompt + tokens + 16)),
            "-b", "2048", "-ub", "512", "-npp", str(prompt), "-ntg", str(tokens),
            "-npl", ",".join(map(str, streams)), "-ngl", "99" if setup.gpu else "0",
            "-fa", setup.attention,
        ]  # fmt: skip
        if setup.threads:
            cmd += ["-t", str(setup.threads)]
        if not setup.gpu:
            cmd += ["--no-repack"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows = [line.split("|")[1:-1] for line in out.splitlines() if re.match(r"^\|\s+\d", line)]
        # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
        return {
            int(r[2]): {"tps": float(r[7]),
                        "serving": int(r[1]) * int(r[2]) / (float(r[4]) + float(r[6]))}
            for r in rows
            if float(r[4]) + float(r[6]) > 0
        }  # fmt: skip
    script = Path(__file__).with_name("raw_decode.py")
    args = [sys.executable, str(script), str(setup.model), "--tokens", str(tokens),
            "--flash-attn", setup.attention]  # fmt: skip
    if setup.threads:
        args += ["--threads", str(setup.threads)]
    return {
        n: {"tps": float(subprocess.run([*args, "--streams", str(n)], capture_output=True,
                                        text=True, check=True).stdout.split()[-1])}
        for n in streams
    }  # fmt: skip


def loop_seconds(url: str) -> tuple[float, float] | None:
    """An infertui host's seconds decoding and seconds its batch loop had work
    (summed over pools), from /metrics; None where the server does not report them."""
    with contextlib.suppress(httpx.HTTPError):
        text = httpx.get(url + "/metrics", timeout=10).text
        decode = re.findall(r"^infertui_engine_decode_seconds_total\{.*\} (\S+)$", text, re.M)
        busy = re.findall(r"^infertui_engine_busy_seconds_total\{.*\} (\S+)$", text, re.M)
        if decode and busy:
            return sum(map(float, decode)), sum(map(float, busy))
    return None


def measure_server(load: Load, streams: int, processes: int) -> dict[str, float]:
    """loadgen's figures, and for an infertui host the share of its loop's busy time that
    went to decoding: the rest is the host's own work, when the device idles."""
    before = loop_seconds(load.url)
    figures = measure(load, streams, 1, processes)
    after = loop_seconds(load.url)
    if before and after and after[1] > before[1]:
        figures["decode_share"] = (after[0] - before[0]) / (after[1] - before[1])
        if after[0] > before[0]:  # tokens/s while llama_decode ran (the prompt's decodes too)
            figures["decoding_tps"] = figures["tokens"] / (after[0] - before[0])
    return figures


def model_id(url: str) -> str:
    return str(httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"])


def run_model(args: argparse.Namespace, setup: Setup) -> list[dict[str, object]]:
    """Both servers stay up side by side (idle when not measured), and every repetition
    measures raw, infertui and llama-server back to back: on a shared, noisy machine the three
    then see the same conditions, and the ratios hold where the absolute figures drift."""
    streams = [int(s) for s in args.streams.split(",")]
    temps = [float(t) for t in args.temps.split(",")]
    prompts = args.prompts.split(",")
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    commands = {"infertui": infertui_cmd(setup)}
    if setup.flash_attn:  # (asked: infertui too; a baseline runs its own default)
        commands["infertui"] += ["--flash-attn", setup.flash_attn]
    if args.baseline:  # another version of infertui, e.g. before a change
        baseline = infertui_cmd(setup, baseline_cli(args.baseline))
        commands["baseline"] = [*baseline_env(args.baseline), *baseline]
    if args.llama_server:
        commands["llama-server"] = llama_server_cmd(args.llama_server, setup)
    samples: dict[tuple[str, float, str, int], list[dict[str, float]]] = {}
    with contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(server(cmd, logs / f"{name}-{setup.model.stem}.log"))
            for name, cmd in commands.items()
        }
        models = {name: model_id(url) for name, url in urls.items()}
        for temp in temps:
            for prompt in prompts:
                for n in streams:
                    for r in range(args.rounds + (1 if n == 1 else 0)):
                        # A failure (out of device memory at 256 streams, say) costs its
                        # row, not the run: GPU time is scarce and the figures print at the end.
                        if prompt == "short":  # again for each sampling, side by side
                            try:
                                raw = raw_limit(args.batched_bench, setup, [n], args.tokens, 16)
                                samples.setdefault(("raw", temp, prompt, n), []).append(raw[n])
                            except (subprocess.CalledProcessError, KeyError) as exc:
                                log.warning("raw x%d failed: %s", n, _tail(exc))
                        for name, url in in_turn(urls, r):
                            load = Load(url, models[name], args.tokens, temp, LONG_REPEAT[prompt],
                                        {})  # fmt: skip
                            try:
                                figures = measure_server(load, n, args.processes)
                            except Exception as exc:  # reported; the run goes on
                                log.warning("%s x%d failed: %r", name, n, exc)
                                continue
                            samples.setdefault((name, temp, prompt, n), []).append(figures)
                    log.info("%s temp %s %s x%d: %s", setup.model.name, temp, prompt, n,
                             {k[0]: [round(f["tps"]) for f in v] for k, v in samples.items()
                              if k[1:] == (temp, prompt, n)})  # fmt: skip
    rows: list[dict[str, object]] = []
    for temp in temps:
        for prompt in prompts:
            for n in streams:
                raw = median_of(samples.get(("raw", temp, prompt, n))) or {}
                rows.append({
                    "model": setup.model.name, "temp": temp, "prompt": prompt, "streams": n,
                    "raw": raw.get("tps"), "raw_serving": raw.get("serving"),
                    "infertui": median_of(samples.get(("infertui", temp, prompt, n))),
                    "llama_server": median_of(samples.get(("llama-server", temp, prompt, n))),
                    "baseline": median_of(samples.get(("baseline", temp, prompt, n))),
                })  # fmt: skip
    return rows


T = TypeVar("T")


def in_turn(servers: dict[str, T], r: int) -> list[tuple[str, T]]:
    """The servers in round r's order, their orders in turn (all of them from n! rounds on;
    fewer rounds favour the first servers named): whoever runs right after another program
    finds the caches cold, and after another infertui finds the code and weights they share
    warm (a baseline that always followed infertui answered its first token 5 ms sooner,
    one always after llama-server 5 ms later)."""
    orders = list(itertools.permutations(servers.items()))
    return list(orders[r % len(orders)])


def _tail(exc: Exception) -> str:
    """The last lines a failed command wrote, or what failed."""
    out = getattr(exc, "stderr", None) or getattr(exc, "stdout", None) or ""
    return " | ".join(str(out).strip().splitlines()[-3:]) or repr(exc)


def median_of(runs: list[dict[str, float]] | None) -> dict[str, float] | None:
    if not runs:
        return None
    keys = [key for key in runs[0] if all(key in run for run in runs)]
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def show(rows: list[dict[str, object]]) -> None:
    """A markdown table: per server, tokens/s (its share of raw) and TTFT p50 / max."""
    servers = [name for name in ("infertui", "llama_server", "baseline")
               if any(row[name] for row in rows)]  # fmt: skip
    head = ["model", "sampling", "prompt", "streams", "raw t/s", "raw+prefill t/s"]
    for name in servers:
        head += [f"{name} t/s (of raw)", "ttft p50 / max"]
    head += [f"infertui / {name}" for name in servers if name != "infertui"]
    head += ["infertui of raw+prefill", "infertui decode share", "infertui decoding (of raw)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        raw, serving = row["raw"], row["raw_serving"]
        sampling = "greedy" if row["temp"] == 0 else f"temp {row['temp']}"
        cells = [str(row["model"]), sampling, str(row["prompt"]), str(row["streams"]),
                 f"{raw:,.0f}" if isinstance(raw, float) else "–",
                 f"{serving:,.0f}" if isinstance(serving, float) else "–"]  # fmt: skip
        figures = {name: row[name] for name in servers}
        for fig in figures.values():
            if not isinstance(fig, dict):
                cells += ["–", "–"]
                continue
            share = f" ({fig['tps'] / raw:.2f})" if isinstance(raw, float) else ""
            ttft = f"{fig['ttft_p50'] * 1000:,.0f} / {fig['ttft_max'] * 1000:,.0f} ms"
            cells += [f"{fig['tps']:,.0f}{share}", ttft]
        ours = figures.get("infertui")  # absent where every infertui run of the model failed
        for name in (s for s in servers if s != "infertui"):
            other = figures[name]
            ok = isinstance(ours, dict) and isinstance(other, dict)
            cells.append(f"{ours['tps'] / other['tps']:.2f}" if ok else "–")  # type: ignore[index]
        if isinstance(ours, dict):
            cells.append(f"{ours['tps'] / serving:.2f}" if isinstance(serving, float) else "–")
            decode_share = ours.get("decode_share")
            cells.append(f"{decode_share:.2f}" if decode_share is not None else "–")
            decoding = ours.get("decoding_tps")
            share = f" ({decoding / raw:.2f})" if decoding and isinstance(raw, float) else ""
            cells.append(f"{decoding:,.0f}{share}" if decoding else "–")
        else:
            cells += ["–", "–", "–"]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], type=Path, help="a GGUF")
    parser.add_argument("--make", action="append", default=[], metavar="SHAPE:VOCAB",
                        help="a random-weight model: tiny, 1b or 8b, e.g. 8b:32000")  # fmt: skip
    parser.add_argument("--llama-server", help="llama-server binary to compare with")
    parser.add_argument("--batched-bench", help="llama-batched-bench binary for the raw limit")
    parser.add_argument("--streams", default="1,8,32,64,256")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temps", default="0,0.8", help="0 is greedy; others add top-p/top-k")
    parser.add_argument("--prompts", default="short,long", help="short (~16 tokens), long (~600+)")
    parser.add_argument("--parallel", type=int, help="slots on both servers (default: streams)")
    parser.add_argument(
        "--ctx", type=int, help="tokens per slot (default 1024; 2048 with long prompts)"
    )
    parser.add_argument("--threads", type=int, help="CPU threads (default: llama.cpp's)")
    parser.add_argument(
        "--flash-attn",
        choices=["auto", "on", "off"],
        help="for every server and raw (default: auto, llama.cpp's choice, every server's "
        "default; a --baseline keeps its own)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (medians)")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument(
        "--host-arg", action="append", default=[], help="an `infertui host` flag (repeatable)"
    )
    parser.add_argument(
        "--baseline",
        metavar="PYTHONPATH",
        help="also run the infertui found on this PYTHONPATH side by side (build/typed of an "
        "older checkout)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the rows
    models = list(args.model)
    for spec in args.make:
        shape, _, vocab = spec.partition(":")
        path = CACHE / f"{shape}-v{vocab or 32000}-q4km.gguf"
        models.append(make_model(path, shape, int(vocab or 32000)))
    if not models:
        parser.error("give --model or --make")
    from infertui.core.engine.llama.devices import gpus

    gpu = bool(gpus())
    streams = [int(s) for s in args.streams.split(",")]
    rows = []
    for path in models:
        ctx = args.ctx or (2048 if "long" in args.prompts.split(",") else 1024)
        setup = Setup(path, args.parallel or min(256, max(streams)), ctx, args.threads,
                      gpu, tuple(args.host_arg), args.flash_attn)  # fmt: skip
        model_rows = run_model(args, setup)
        show(model_rows)  # each model's figures as soon as they are in: a later one may fail
        rows += model_rows
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    if shutil.which("nvidia-smi"):
        subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total",
                        "--format=csv"], check=False)  # fmt: skip


if __name__ == "__main__":
    main()
