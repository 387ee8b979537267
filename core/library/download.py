"""One file from a URL into the library: resumed where a partial copy stopped (HTTP Range),
hashed as it arrives, and renamed into place only once its sha256 is the published one.

Runs on a thread of its own (the CLI's, or one the host lends): a file lock lets two pulls of
one file, in one process or two, share the download (the second waits and finds it done).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..protocol.errors import ErrorKind, InferError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SPARE_BYTES = 64 << 20  # left free beyond a download, for the library's own small files

Progress = Callable[[int, int | None], None]  # bytes so far, and of how many (None: unknown)


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


def partial_of(dest: Path) -> Path:
    return dest.with_name(dest.name + ".partial")


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
    client: httpx.Client,
    remote: RemoteFile,
    dest: Path,
    *,
    progress: Progress = lambda done, total: None,
    cancel: threading.Event | None = None,
) -> str:
    """`remote` at `dest`, verified; returns its sha256. A cancel (or Ctrl-C) leaves the
    partial file to resume from; a wrong sha256 leaves nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest):
        if dest.exists():  # another pull finished it while this one waited
            size = dest.stat().st_size
            progress(size, size)
            return remote.sha256 or _hash_file(dest).hexdigest()
        partial = partial_of(dest)
        hasher = _hash_file(partial) if partial.exists() else hashlib.sha256()
        done = partial.stat().st_size if partial.exists() else 0
        if remote.size is not None and done > remote.size:
            partial.unlink()  # longer than the file: not a prefix of it
            hasher, done = hashlib.sha256(), 0
        if remote.size is None or done < remote.size:
            done, hasher = _stream(client, remote, partial, hasher, done, progress, cancel)
        progress(done, remote.size or done)
        got = hasher.hexdigest()
        if remote.sha256 and got != remote.sha256.lower():
            partial.unlink(missing_ok=True)
            raise InferError(
                ErrorKind.DIGEST_MISMATCH,
                f"{remote.name}: its sha256 is {got}, not the published {remote.sha256}: "
                "the download was refused",
            )
        partial.rename(dest)
        return got


def _stream(
    client: httpx.Client,
    remote: RemoteFile,
    partial: Path,
    hasher: hashlib._Hash,
    done: int,
    progress: Progress,
    cancel: threading.Event | None,
) -> tuple[int, hashlib._Hash]:
    headers = {**remote.headers, "Accept-Encoding": "identity"}
    if done:
        headers["Range"] = f"bytes={done}-"
    with client.stream("GET", remote.url, headers=headers, follow_redirects=True) as response:
        if response.status_code == 416 and done:  # nothing past what is here
            return done, hasher
        raise_for_source(response, remote.name)
        if done and response.status_code != 206:  # the server ignored the range: start over
            log.info("%s: the server does not resume; fetching it whole", remote.name)
            hasher, done = hashlib.sha256(), 0
        total = remote.size or _length(response, done)
        with partial.open("ab" if done else "wb") as out:
            try:
                for chunk in response.iter_raw(CHUNK):
                    out.write(chunk)
                    hasher.update(chunk)
                    done += len(chunk)
                    progress(done, total)
                    if cancel is not None and cancel.is_set():
                        raise InferError(ErrorKind.ABORTED, "the pull was cancelled")
            except OSError as err:
                if err.errno == errno.ENOSPC:
                    raise InferError(
                        ErrorKind.NO_SPACE, f"the disk filled up during {remote.name}"
                    ) from None
                raise
            except httpx.TransportError as err:
                raise InferError(
                    ErrorKind.CONNECT_FAILED,
                    f"{remote.name}: the download broke off at {done} bytes ({err}); "
                    "pull again to resume",
                ) from None
    if total is not None and done < total:
        raise InferError(
            ErrorKind.CONNECT_FAILED,
            f"{remote.name}: the server sent {done} of {total} bytes; pull again to resume",
        )
    return done, hasher


def _length(response: httpx.Response, done: int) -> int | None:
    length = response.headers.get("Content-Length")
    return done + int(length) if length and length.isdigit() else None


def raise_for_source(response: httpx.Response, what: str) -> None:
    """A source's refusal as the cause a person can act on."""
    status = response.status_code
    if status < 400:
        return
    if status in (401, 403):
        raise InferError(ErrorKind.UNAUTHORIZED, f"{what}: the source refused access ({status})")
    if status == 404:
        raise InferError(ErrorKind.MODEL_NOT_FOUND, f"{what}: not found at the source")
    raise InferError(ErrorKind.CONNECT_FAILED, f"{what}: the source answered {status}")


def _hash_file(path: Path) -> hashlib._Hash:
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
