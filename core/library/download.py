"""One file from a URL into the library: resumed where a partial copy stopped (HTTP Range),
hashed as it arrives, and renamed into place only once its sha256 is the published one.

Runs on a thread of its own (the CLI's, or one the host lends): a file lock lets two pulls of
one file, in one process or two, share the download (the second waits and finds it done).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import http.client
import logging
import queue
import shutil
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.client import HTTPMessage
from pathlib import Path
from typing import IO, BinaryIO, Protocol
from urllib.parse import urlsplit

import certifi

from ..protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # a read: 4 MiB ones were slower (0.21 GiB/s), past the CPU's caches
RING = 4  # buffers in flight between the socket, the disk and sha256
READ_TIMEOUT_S = 120.0  # a source silent this long is taken as gone (the pull resumes later)
SPARE_BYTES = 64 << 20  # left free beyond a download, for the library's own small files

Progress = Callable[[int, int | None], None]
Headers = (
    Mapping[str, str] | Message
)  # httpx's, or http.client's  # bytes so far, and of how many (None: unknown)


@dataclass(frozen=True)
class RemoteFile:
    """A file to fetch: its URL, its name in the model's folder, and what to check it by."""

    url: str
    name: str
    sha256: str | None  # hex; None where the source publishes none (a plain URL)
    size: int | None
    headers: dict[str, str] = field(default_factory=dict)  # a gated repository's token

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha256}" if self.sha256 else self.name


def partial_of(dest: Path, sha256: str | None) -> Path:
    """Where a download of `dest` grows: named by what it should hash to, so that the part of
    an older version of the file is never resumed with a newer one's bytes."""
    return dest.with_name(
        f"{dest.name}.{sha256[:16]}.partial" if sha256 else f"{dest.name}.partial"
    )


def verified_sha(dest: Path) -> str | None:
    """The sha256 a file in the library was verified to have when it was filed."""
    try:
        return dest.with_name(dest.name + ".sha256").read_text("ascii").strip()
    except OSError:
        return None


def check_space(folder: Path, needed: int) -> None:
    """NO_SPACE before a byte is fetched, where the disk cannot hold what is to come."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if needed + SPARE_BYTES > free:
        raise InferError(
            ErrorKind.NO_SPACE,
            f"not enough disk for the download: {needed / 1e9:.2f} GB to fetch, "
            f"{free / 1e9:.2f} GB free in {folder}",
        )


def fetch(
    remote: RemoteFile,
    dest: Path,
    *,
    progress: Progress = lambda done, total: None,
    cancel: threading.Event | None = None,
    opener: Opener | None = None,
) -> str:
    """`remote` at `dest`, verified; returns its sha256. A cancel (or Ctrl-C) leaves the
    partial file to resume from; a wrong sha256 leaves nothing. `opener` gives the bytes:
    over HTTP (http_body, the default), or from another host over Hyperswarm."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest):
        dest.parent.mkdir(parents=True, exist_ok=True)  # a refused pull may have taken it
        have = verified_sha(dest) if dest.exists() else None
        if have is not None and (remote.sha256 is None or have == remote.sha256.lower()):
            size = dest.stat().st_size  # filed already (by a pull this one waited for)
            progress(size, size)
            return have
        partial = partial_of(dest, remote.sha256)
        hasher = hash_file(partial) if partial.exists() else hashlib.sha256()
        done = partial.stat().st_size if partial.exists() else 0
        if remote.size is not None and done > remote.size:
            partial.unlink()  # longer than the file: not a prefix of it
            hasher, done = hashlib.sha256(), 0
        if remote.size is None or done < remote.size:
            transfer = _Transfer(
                remote, partial, hasher, done, progress, cancel, opener or http_body
            )
            done, hasher = transfer.run()
        progress(done, remote.size or done)
        got = hasher.hexdigest()
        if remote.sha256 and got != remote.sha256.lower():
            partial.unlink(missing_ok=True)
            raise InferError(
                ErrorKind.DIGEST_MISMATCH,
                f"{remote.name}: its sha256 is {got}, not the published {remote.sha256}: "
                "the download was refused",
            )
        partial.replace(dest)  # an older version of the file goes (an engine keeps its map)
        dest.with_name(dest.name + ".sha256").write_text(got, "ascii")
        return got


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed with a token only for the host it was given for: the Hub sends a
    file to its CDN on a signed URL, which needs no token and must not see it."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
        headers: HTTPMessage, newurl: str,
    ) -> urllib.request.Request | None:  # fmt: skip
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        old, moved = urlsplit(req.full_url), urlsplit(newurl)
        if new is not None and (moved.netloc, moved.scheme) != (old.netloc, old.scheme):
            new.remove_header("Authorization")
        return new


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """urllib's, for its http.client responses: `readinto` a large buffer reads at the socket's
    pace, where httpx's 64 KiB reads held a pull to 0.43 of curl (bench/bench_pull.py). It
    honours the *_PROXY variables as httpx does; certifi's roots are trusted besides the
    system's. Made once: loading the roots takes 0.1 s."""
    context = ssl.create_default_context()
    context.load_verify_locations(certifi.where())
    return urllib.request.build_opener(_Redirects, urllib.request.HTTPSHandler(context=context))


class Body(Protocol):
    """A file's bytes from an offset on, as an HTTP response gives them: its status (206 for
    a range), its headers, and `readinto`, which gives 0 at the end."""

    @property
    def status(self) -> int | None: ...
    @property
    def headers(self) -> Headers: ...
    def readinto(self, buffer: bytearray) -> int: ...
    def close(self) -> None: ...


Opener = Callable[[RemoteFile, int], Body]  # the file from this byte on (0: all of it)


def http_body(remote: RemoteFile, offset: int) -> Body:
    """A GET of `remote.url` from `offset` (a Range), 4xx and 5xx answers included."""
    headers = {**remote.headers, "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(remote.url, headers=headers)
    try:
        response: Body = _opener().open(request, timeout=READ_TIMEOUT_S)
    except urllib.error.HTTPError as refused:  # 4xx and 5xx come as this
        response = refused
    return response


@dataclass
class _Transfer:
    """One GET of the rest of a file into its partial copy, hashed as it comes."""

    remote: RemoteFile
    partial: Path
    hasher: hashlib._Hash
    done: int
    progress: Progress
    cancel: threading.Event | None
    opener: Opener

    def run(self) -> tuple[int, hashlib._Hash]:
        remote = self.remote
        try:
            response = self.opener(remote, self.done)
            try:
                self._receive(response)
            finally:
                response.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                raise InferError(
                    ErrorKind.NO_SPACE, f"the disk filled up during {remote.name}"
                ) from None
            raise InferError(
                ErrorKind.CONNECT_FAILED,
                f"{remote.name}: the download broke off at {partial_size(self.partial)} bytes "
                f"({getattr(err, 'reason', err)}); pull again to resume",
            ) from None
        return self.done, self.hasher

    def _receive(self, response: Body) -> None:
        remote, partial = self.remote, self.partial
        status, headers = response.status, response.headers
        if status == 416 and self.done:  # nothing past what is here, if all
            if headers.get("Content-Range") == f"bytes */{self.done}":
                return
            partial.unlink(missing_ok=True)  # not a prefix of the file any more
            raise InferError(
                ErrorKind.CONNECT_FAILED, f"{remote.name}: the source changed; pull again"
            )
        raise_for_source(status, headers, remote.name)
        if self.done and status != 206:  # the range was ignored: start over
            log.info("%s: the server does not resume here; fetching it whole", remote.name)
            self.hasher, self.done = hashlib.sha256(), 0
        elif self.done and _range_start(headers) != self.done:
            raise InferError(
                ErrorKind.CONNECT_FAILED,
                f"{remote.name}: the source sent another range than asked",
            )
        total = remote.size or _length(headers, self.done)
        with partial.open("ab" if self.done else "wb") as out:
            self._copy(response, out, total)
        if total is not None and self.done < total:
            raise InferError(
                ErrorKind.CONNECT_FAILED,
                f"{remote.name}: the server sent {self.done} of {total} bytes; pull again to "
                "resume",
            )

    def _copy(self, response: Body, out: BinaryIO, total: int | None) -> None:
        """A pipeline over a ring of buffers: this thread reads the socket, one thread writes
        the disk and one hashes, each in order, each on a core of its own where there is one.
        One thread doing all three reached half of curl's rate; sha256 alone runs at 1.5
        GiB/s on a core (bench/README.md, "Pulls against curl")."""
        free: queue.Queue[_Piece] = queue.Queue()
        for _ in range(RING):
            free.put((bytearray(CHUNK), 0))
        hasher = _Stage(self.hasher.update, free, "pull-hash")
        writer = _Stage(out.write, hasher, "pull-write")
        said = self.done
        try:
            while True:
                buffer, _ = free.get()  # one that both stages are done with
                if writer.error or hasher.error:
                    break
                n = response.readinto(buffer)
                if not n:
                    break
                if total is not None and self.done + n > total:
                    raise InferError(
                        ErrorKind.DIGEST_MISMATCH,
                        f"{self.remote.name}: the source sent more than its {total} bytes",
                    )
                writer.inbox.put((buffer, n))
                self.done += n
                if self.done - said >= CHUNK:  # progress every MiB, not every read
                    said = self.done
                    self.progress(self.done, total)
                    if self.cancel is not None and self.cancel.is_set():
                        raise InferError(ErrorKind.ABORTED, "the pull was cancelled")
        finally:  # what was read is written (a partial file to resume from) before this ends
            writer.inbox.put(None)
            writer.join()
            hasher.join()
        if writer.error or hasher.error:
            raise writer.error or hasher.error  # type: ignore[misc]


_Piece = tuple[bytearray, int]  # a buffer and how many of its bytes are the file's


class _Stage(threading.Thread):
    """One step of a pull's pipeline: each piece in order through `work`, then on to the next
    stage (or back to the free buffers). After an error it passes pieces on untouched, so
    that no stage waits for ever; the reading thread raises it."""

    def __init__(
        self, work: Callable[[memoryview], object], after: _Stage | queue.Queue[_Piece], name: str
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.inbox: queue.Queue[_Piece | None] = queue.Queue()
        self.work, self.after = work, after
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        after = self.after.inbox if isinstance(self.after, _Stage) else self.after
        while (piece := self.inbox.get()) is not None:
            if self.error is None:
                try:
                    self.work(memoryview(piece[0])[: piece[1]])
                except BaseException as err:
                    self.error = err
            after.put(piece)
        if isinstance(self.after, _Stage):
            self.after.inbox.put(None)


def _range_start(headers: Headers) -> int:
    """Where a 206's bytes start (`Content-Range: bytes START-END/SIZE`); -1 if it does not say."""
    start = headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
    return int(start) if start.isdigit() else -1


def partial_size(partial: Path) -> int:
    return partial.stat().st_size if partial.exists() else 0


def _length(headers: Headers, done: int) -> int | None:
    length = headers.get("Content-Length")
    return done + int(length) if length and length.isdigit() else None


def raise_for_source(status: int | None, headers: Headers, what: str) -> None:
    """A source's refusal as the cause a person can act on."""
    if status is None or status < 400:
        return
    if headers.get("X-Error-Code") == "GatedRepo":  # the Hub's word for it
        raise InferError(
            ErrorKind.UNAUTHORIZED,
            f"{what} is gated: accept its terms on the Hub, then set HF_TOKEN to a token with "
            "access",
        )
    if status in (401, 403):
        raise InferError(ErrorKind.UNAUTHORIZED, f"{what}: the source refused access ({status})")
    if status == 404:
        raise InferError(ErrorKind.MODEL_NOT_FOUND, f"{what}: not found at the source")
    raise InferError(ErrorKind.CONNECT_FAILED, f"{what}: the source answered {status}")


def hash_file(path: Path) -> hashlib._Hash:
    """The sha256 of a file so far (a partial one resumes hashing from it)."""
    hasher = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            hasher.update(block)
    return hasher


@contextmanager
def _locked(dest: Path) -> Iterator[None]:
    with dest.with_name(dest.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
