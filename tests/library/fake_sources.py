"""A loopback server that speaks the Hugging Face Hub's download protocol and Ollama's
registry protocol as the real ones do, over GGUFs the tests make, with the faults a pull must
survive: a connection cut mid-file, a corrupted byte, a gated repository.

    Hub       GET  /api/models/ORG/REPO/revision/main?blobs=true   files, LFS sha256s, commit
              HEAD /ORG/REPO/resolve/COMMIT/FILE   302 to /cdn/SHA256, with X-Repo-Commit,
                                                   X-Linked-Etag and X-Linked-Size (401
                                                   with X-Error-Code: GatedRepo where gated)
    Registry  GET  /v2/NS/MODEL/manifests/TAG      the manifest (docker v2 media type)
              GET  /v2/NS/MODEL/blobs/DIGEST       307 to /cdn/SHA256
    Both      GET  /cdn/SHA256                     the bytes, with Range
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Blob:
    data: bytes
    sha256: str = field(init=False)

    def __post_init__(self) -> None:  # once: a 256 MiB blob takes 0.2 s to hash
        self.sha256 = hashlib.sha256(self.data).hexdigest()


@dataclass
class Sources:
    """What the server holds, and what it did: bytes sent per blob, faults to inject."""

    repos: dict[str, dict[str, Blob]] = field(default_factory=dict)  # ORG/REPO -> file -> blob
    gated: dict[str, str] = field(default_factory=dict)  # ORG/REPO -> the token that opens it
    manifests: dict[str, list[tuple[str, Blob]]] = field(default_factory=dict)  # NS/M:TAG
    blobs: dict[str, Blob] = field(default_factory=dict)  # sha256 -> blob
    sent: dict[str, int] = field(default_factory=dict)  # sha256 -> bytes sent
    cut_after: int | None = None  # the next blob response stops after so many bytes
    corrupt: bool = False  # blobs are sent with one byte changed
    throttle_s: float = 0.0  # a pause after each 64 KiB sent (a slow link)
    ignore_range: bool = False  # as a server that cannot resume: 200 and the whole file
    sendfile_from: Path | None = None  # the one blob's file, sent as a web server sends it
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_repo_file(self, repo: str, name: str, path: Path) -> Blob:
        blob = Blob(path.read_bytes())
        self.repos.setdefault(repo, {})[name] = blob
        self.blobs[blob.sha256] = blob
        return blob

    def add_manifest(self, name: str, layers: list[tuple[str, bytes]]) -> None:
        entries = [(kind, Blob(data)) for kind, data in layers]
        self.manifests[name] = entries
        for _, blob in entries:
            self.blobs[blob.sha256] = blob


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, *, head: bool) -> None:
        src = self.server.sources
        path = self.path.split("?", 1)[0]
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/main", path):
            return self._model_info(src, m.group(1))
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            return self._resolve(src, m.group(1), m.group(3))
        if m := re.fullmatch(r"/v2/([^/]+)/([^/]+)/manifests/([^/]+)", path):
            return self._manifest(src, f"{m.group(1)}/{m.group(2)}:{m.group(3)}")
        if m := re.fullmatch(r"/v2/[^/]+/[^/]+/blobs/sha256:([0-9a-f]{64})", path):
            return self._send(307, b"", {"Location": f"/cdn/{m.group(1)}"})
        if m := re.fullmatch(r"/cdn/([0-9a-f]{64})", path):
            return self._blob(src, m.group(1), head=head)
        self._send(404, b"not found")

    def _allowed(self, src: Sources, repo: str) -> bool:
        token = src.gated.get(repo)
        return token is None or self.headers.get("Authorization") == f"Bearer {token}"

    def _model_info(self, src: Sources, repo: str) -> None:
        """As the Hub: a gated repository's files are listed to anyone; only its resolve
        URLs ask for the token."""
        files = src.repos.get(repo)
        if files is None:
            return self._send(401, b"repo not found", {"X-Error-Code": "RepoNotFound"})
        siblings = [
            {"rfilename": name, "size": len(b.data),
             "lfs": {"sha256": b.sha256, "size": len(b.data), "pointerSize": 134}}
            for name, b in files.items()
        ]  # fmt: skip
        siblings.append({"rfilename": "README.md", "size": 10})
        self._json({"id": repo, "sha": COMMIT, "siblings": siblings})

    def _resolve(self, src: Sources, repo: str, name: str) -> None:
        blob = src.repos.get(repo, {}).get(name)
        if not self._allowed(src, repo):
            return self._send(401, b"gated", {"X-Error-Code": "GatedRepo"})
        if blob is None:
            return self._send(404, b"entry not found", {"X-Error-Code": "EntryNotFound"})
        self._send(302, b"", {
            "Location": f"/cdn/{blob.sha256}", "X-Repo-Commit": COMMIT,
            "X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(len(blob.data)),
        })  # fmt: skip

    def _manifest(self, src: Sources, name: str) -> None:
        layers = src.manifests.get(name)
        if layers is None:
            return self._json({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, 404)
        self._json({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "digest": "sha256:" + "0" * 64, "size": 2},
            "layers": [{"mediaType": f"application/vnd.ollama.image.{kind}",
                        "digest": f"sha256:{b.sha256}", "size": len(b.data)}
                       for kind, b in layers],
        })  # fmt: skip

    def _blob(self, src: Sources, sha: str, *, head: bool) -> None:
        blob = src.blobs.get(sha)
        if blob is None:
            return self._send(404, b"no such blob")
        data = blob.data
        start, status = 0, 200
        asked = "" if src.ignore_range else self.headers.get("Range", "")
        if m := re.fullmatch(r"bytes=(\d+)-", asked):
            start, status = int(m.group(1)), 206
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        body = memoryview(data)[start:]  # a view: no copy of a big blob per request
        if src.corrupt and body:
            body = memoryview(bytes([body[0] ^ 0xFF]) + body[1:])
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if head:
            return
        with src.lock:
            cut, src.cut_after = src.cut_after, None
        body = body[:cut] if cut is not None else body
        if src.sendfile_from is not None and cut is None and not (src.corrupt or src.throttle_s):
            with src.lock:  # (counted first, as below)
                src.sent[sha] = src.sent.get(sha, 0) + len(body)
            self._sendfile(src.sendfile_from, start, len(body))
            return
        for i in range(0, len(body), 1 << 16):
            piece = body[i : i + (1 << 16)]
            with src.lock:  # counted before the write: the client may be done as it returns
                src.sent[sha] = src.sent.get(sha, 0) + len(piece)
            self.wfile.write(piece)
            if src.throttle_s:
                time.sleep(src.throttle_s)
        if cut is not None:
            self.close_connection = True

    def _sendfile(self, path: Path, start: int, count: int) -> None:
        """As a web server sends a file: the kernel copies it from the page cache."""
        self.wfile.flush()
        with path.open("rb") as f:
            self.connection.sendfile(f, start, count)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sources: Sources


def serve(sources: Sources) -> tuple[str, _Server]:
    """Start the server on a free loopback port; returns its address (HOST:PORT)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.sources = sources
    threading.Thread(target=server.serve_forever, daemon=True, name="sources").start()
    host, port = server.server_address[:2]
    return f"{host}:{port}", server


@contextlib.contextmanager
def hub_of(repo: str, file: str, path: Path, monkeypatch: Any) -> Iterator[Sources]:
    """A loopback Hub holding one GGUF, that pulls in this test reach (HF_ENDPOINT)."""
    held = Sources()
    held.add_repo_file(repo, file, path)
    address, server = serve(held)
    monkeypatch.setenv("HF_ENDPOINT", f"http://{address}")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    try:
        yield held
    finally:
        server.shutdown()
        server.server_close()
