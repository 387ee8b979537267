"""A pull from another host over Hyperswarm (`infertui pull peer:<server-id>/<name>`), on a
loopback DHT testnet, against curl fetching the same file from a loopback web server. Prints
medians and the ratio. Both run on this machine: the serving host, its Node bridge, the
pulling side and its bridge share the same cores (2 here), as curl and its server do.

    .venv/bin/python bench/bench_peer_pull.py [--megabytes 256] [--rounds 3]

The serving host is `infertui host --headless` with a model folder holding one file of random
bytes named *.gguf (a share sends bytes; it does not load them), sharing with the pulling
side's key. The file's sha256 is worked out on the first share; the first round is a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infertui.core.library import Library
from infertui.core.transport.p2p.ids import public_key, server_id, z32_encode
from infertui.core.transport.p2p.peer_pull import PeerPulls
from infertui.core.transport.p2p.runtime import start_testnet


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-peer-pull-"))
    testnet, bootstrap = await start_testnet()
    try:
        folder = work / "shared"
        folder.mkdir()
        (folder / "big.gguf").write_bytes(os.urandom(args.megabytes << 20))
        host_seed, puller_seed = os.urandom(32), os.urandom(32)
        (work / "host-data").mkdir()
        (work / "host-data" / "host-key.seed").write_text(host_seed.hex() + "\n")
        env = {**os.environ, "INFERTUI_DATA_DIR": str(work / "host-data"),
               "INFERTUI_HOST__MODEL_DIRS": json.dumps([str(folder)])}  # fmt: skip
        host = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
            [sys.executable, "-m", "infertui.app.cli", "host", "--headless", "--threads", "1",
             "--bootstrap", bootstrap[0], "--share", z32_encode(public_key(puller_seed))],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
        )  # fmt: skip
        assert host.stderr is not None
        sid = server_id(host_seed)
        while f"announced as {sid}" not in await asyncio.to_thread(host.stderr.readline):
            pass
        threading.Thread(target=host.stderr.read, daemon=True).start()
        web = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))
        threading.Thread(target=web.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{web.server_address[1]}/big.gguf"
        peers = PeerPulls(bootstrap=bootstrap, seed=puller_seed)
        peer_s, curl_s = [], []
        for round_ in range(args.rounds + 1):
            library = Library(work / f"library-{round_}")
            start = time.perf_counter()
            await peers.pull(library, f"peer:{sid}/big")
            took = time.perf_counter() - start
            shutil.rmtree(work / f"library-{round_}")
            start = time.perf_counter()
            curl = ["curl", "-sf", "-o", str(work / "curl.out"), url]
            await asyncio.to_thread(subprocess.run, curl, check=True)
            curl_took = time.perf_counter() - start
            (work / "curl.out").unlink()
            if round_:  # the first: the serving host hashes the file, once
                peer_s.append(took)
                curl_s.append(curl_took)
        web.shutdown()
        host.terminate()
        host.wait(30)
    finally:
        if testnet.stdin is not None:
            testnet.stdin.close()
        await testnet.wait()
        shutil.rmtree(work, ignore_errors=True)
    size = args.megabytes / 1024
    peer, curl = statistics.median(peer_s), statistics.median(curl_s)
    print(
        f"{args.megabytes} MiB, median of {args.rounds} rounds, one machine\n"
        f"  curl from a loopback web server   {size / curl:6.2f} GiB/s\n"
        f"  peer pull over Hyperswarm         {size / peer:6.2f} GiB/s (sha256 checked, filed)\n"
        f"  peer / curl                       {curl / peer:6.2f}"
    )


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    asyncio.run(main())
