"""Pull throughput against curl: the same file from the same loopback Hub (the tests' fake
one, tests/library/fake_sources.py), side by side, round after round. Prints medians and
the ratio; issue 36 asks >= 0.9: the progress callback and the sha256 must cost next to
nothing.

    .venv/bin/python bench/bench_pull.py [--megabytes 512] [--rounds 5]

Both write the file into the same folder. `pull` also hashes it as it comes, and files it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fake Hub

from infertui.core.library import Library, pull
from tests.library.fake_sources import Sources, serve

REPO = "bench/Big-GGUF"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--folder",
        type=Path,
        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
        help="where both write (default /dev/shm, memory: this box's shared disk made runs "
        "swing from 0.64 to 1.35; give a disk folder to include the disk)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pull-", dir=args.folder))
    try:
        source = work / "Big-Q4_K_M.gguf"
        source.write_bytes(os.urandom(args.megabytes << 20))
        addresses: multiprocessing.Queue[tuple[str, str]] = multiprocessing.Queue()
        server = multiprocessing.Process(target=_serve, args=(source, addresses), daemon=True)
        server.start()  # a process of its own, as a real server is: not the pull's GIL
        address, sha256 = addresses.get(timeout=60)
        os.environ["HF_ENDPOINT"] = f"http://{address}"
        url = f"http://{address}/cdn/{sha256}"
        curl_s, pull_s = [], []
        for _ in range(args.rounds):
            out = work / "curl.out"
            start = time.perf_counter()
            subprocess.run(["curl", "-sf", "-o", str(out), url], check=True)
            curl_s.append(time.perf_counter() - start)
            out.unlink()
            library = Library(work / "library")
            start = time.perf_counter()
            pull(library, f"hf.co/{REPO}", progress=lambda event: None)
            pull_s.append(time.perf_counter() - start)
            shutil.rmtree(work / "library")
        server.terminate()
        size = args.megabytes / 1024
        curl, ours = statistics.median(curl_s), statistics.median(pull_s)
        sys.stdout.write(
            f"{args.megabytes} MiB from loopback into {work.parent}, median of {args.rounds} "
            "rounds\n"
            f"  curl            {size / curl:6.2f} GiB/s\n"
            f"  infertui pull   {size / ours:6.2f} GiB/s (sha256 checked, filed)\n"
            f"  pull / curl     {curl / ours:6.2f}\n"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _serve(source: Path, addresses: multiprocessing.Queue[tuple[str, str]]) -> None:
    held = Sources(sendfile_from=source)  # the bytes by sendfile: the server, on our 2 cores,
    blob = held.add_repo_file(REPO, source.name, source)  # takes next to none from the pull
    address, _ = serve(held)
    addresses.put((address, blob.sha256))
    threading.Event().wait()


if __name__ == "__main__":
    main()
