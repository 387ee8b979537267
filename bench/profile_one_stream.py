"""Where one stream's time goes on the host (issue 38 §1): py-spy samples the host while one
client streams 256-token sampled completions from the tiny 32k model (one thread, one slot).

    PATH=.venv/bin:$PATH .venv/bin/python bench/profile_one_stream.py

Prints the warm-up rates, then the samples per thread and the hottest leaf frames.
"""

import collections
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench_api import start_host  # bench/ is this script's folder: on sys.path
from loadgen import Load, measure
from make_model import make_model

SPY = ["py-spy", "record", "-d", "12", "-f", "raw", "-r", "500", "--threads", "--nonblocking"]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="profile-one-stream-"))
    model = make_model(work / "tiny-32k.gguf", "tiny", 32000)
    env = {**os.environ, "INFERTUI_DATA_DIR": str(work / "data")}
    proc, url = start_host(1, 1, "--model", str(model), env=env)
    try:
        for temperature in (0.0, 0.8):
            load = Load(url, "default", 256, temperature, 0, {})
            print(f"temperature {temperature}: {measure(load, 1, 3, 1)['tps']:.0f} tok/s")
        raw = work / "spy.txt"
        spy = subprocess.Popen(
            [*SPY, "-p", str(proc.pid), "-o", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)
        load = Load(url, "default", 256, 0.8, 0, {})
        print(f"under py-spy, temperature 0.8: {measure(load, 1, 6, 1)['tps']:.0f} tok/s")
        spy.wait(60)
        summarize(raw)
    finally:
        proc.terminate()
        proc.wait(30)


def summarize(raw: Path) -> None:
    """Samples per thread, and the 15 hottest leaf frames of the busy ones."""
    threads: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        threads[frames[0]] += int(count)
        leaves[frames[0], frames[-1]] += int(count)
    for thread, count in threads.most_common(4):
        print(f"{count:6d}  {thread}")
    for (thread, frame), count in leaves.most_common(15):
        print(f"{count:6d}  {thread[:28]:28s}  {frame[:90]}")


if __name__ == "__main__":
    main()
