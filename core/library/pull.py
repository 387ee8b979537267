"""`infertui pull NAME`: plan the files (sources.py), check the disk, fetch each (resumed,
hashed: download.py) and write the manifest last. Progress is said as Ollama's `/api/pull`
lines say it: `status`, and while a file comes `digest`, `total` and `completed`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from ..protocol.errors import ErrorKind, InferError
from .download import Opener, check_space, fetch, partial_of
from .names import ModelName, parse_name
from .sources import Plan
from .sources import plan as plan_of
from .store import Library, LibraryModel

PullEvent = dict[str, Any]
TIMEOUT = httpx.Timeout(30.0, read=120.0)


def pull(
    library: Library,
    text: str,
    *,
    insecure: bool = False,
    sha256: str | None = None,
    progress: Callable[[PullEvent], None] = lambda event: None,
    cancel: threading.Event | None = None,
    client: httpx.Client | None = None,
) -> LibraryModel:
    """Blocking: run it on a thread of its own (the host does, see HostService) or the CLI's."""
    name = parse_name(text)
    progress({"status": "pulling manifest"})
    own = client is None
    http = client or httpx.Client(timeout=TIMEOUT)
    try:
        plan = plan_of(http, name, insecure=insecure, sha256=sha256)
    finally:
        if own:
            http.close()
    return pull_plan(library, name, plan, progress=progress, cancel=cancel)


def pull_plan(
    library: Library,
    name: ModelName,
    plan: Plan,
    *,
    progress: Callable[[PullEvent], None] = lambda event: None,
    cancel: threading.Event | None = None,
    opener: Opener | None = None,
) -> LibraryModel:
    """The plan's files fetched (by `opener`: HTTP unless another host's), checked, and filed
    under `name`. Blocking, as `pull`."""
    folder = library.folder_of(name)
    try:
        have = sum(_bytes_here(folder / f.name, f.sha256) for f in plan.files)
        check_space(folder, max(0, plan.size - have))
        hashes = []
        for remote in plan.files:
            status = f"pulling {remote.sha256[:12] if remote.sha256 else remote.name}"
            said = partial(_fetching, progress, status, remote.digest)
            dest = folder / remote.name
            hashes.append(fetch(remote, dest, progress=said, cancel=cancel, opener=opener))
        progress({"status": "verifying sha256 digest"})
        progress({"status": "writing manifest"})
        model = library.record(name, plan, hashes)
    except InferError as err:
        # A refused pull leaves nothing (a cut or cancelled one leaves its partial files to
        # resume from); a model already filed under the name stays.
        refused = err.kind in (ErrorKind.DIGEST_MISMATCH, ErrorKind.MODEL_NOT_FOUND)
        if refused and folder.is_dir() and not any(folder.glob("*.sha256")):
            library.discard(folder)  # nothing verified in it (a split's good part 1 stays)
        raise
    progress({"status": "success"})
    return model


def _fetching(
    progress: Callable[[PullEvent], None], status: str, digest: str, done: int, total: int | None
) -> None:
    progress({"status": status, "digest": digest, "total": total, "completed": done})


def _bytes_here(dest: Path, sha256: str | None) -> int:
    """What a pull has of a file already: all of it, or its partial copy's bytes."""
    for path in (dest, partial_of(dest, sha256)):
        if path.exists():
            return path.stat().st_size
    return 0
