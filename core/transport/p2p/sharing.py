"""A host's library, shared with other infertui hosts over Hyperswarm (issue 36 §5), for GPU
boxes that reach no hub but reach each other.

    model_share {name}                 -> model_share {name, source, files: [{name, size,
                                          sha256}], layers}
    model_read {name, file, offset}    -> model_read {bytes: N} and N raw bytes after its
                                          line, ..., then model_read {done: true};
                                          `unsubscribe` stops it

Only peers the host lets pull may ask: its --admin peers and the server IDs of
`host.p2p.share`. A file of a configured model folder has no sha256 on record: it is hashed
once, when first shared, so that the pulling side can check every byte as for a hub's file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ...library import Library, LibraryModel
from ...library.download import hash_file
from ...protocol.common import MAX_PATH
from ...protocol.errors import ErrorKind, InferError

SHARE_TYPES = ("model_share", "model_read")
PIECE = 1 << 20  # bytes a piece (as base64 in JSON, pulls ran at 0.04 of curl)


class ShareRequest(BaseModel):
    name: str = Field(min_length=1, max_length=MAX_PATH)
    file: str | None = Field(None, max_length=MAX_PATH)
    offset: int = Field(0, ge=0)


class Sharing:
    """What a host shares of its library, and the sha256s it worked out for folder files."""

    def __init__(self, library: Library) -> None:
        self._library = library
        self._hashed: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256

    async def manifest(self, name: str) -> dict[str, Any]:
        model = await self._model(name)
        manifest = await asyncio.to_thread(self._library.manifest, model)
        files = []
        for entry in manifest["files"]:
            sha = entry.get("sha256") or await self._sha_of(model.path.parent / entry["name"])
            files.append({"name": entry["name"], "size": entry["size"], "sha256": sha})
        return {"name": model.name, "source": model.source, "files": files,
                "layers": manifest.get("layers") or {}}  # fmt: skip

    async def pieces(self, name: str, file: str, offset: int) -> AsyncIterator[bytes]:
        """One of the model's files from `offset`, a piece at a time; never a path that is not
        one of its files."""
        model = await self._model(name)
        manifest = await asyncio.to_thread(self._library.manifest, model)
        if file not in {entry["name"] for entry in manifest["files"]}:
            raise InferError(ErrorKind.NOT_FOUND, f"{model.name} has no file {file}")
        f = await asyncio.to_thread((model.path.parent / file).open, "rb")
        try:
            await asyncio.to_thread(f.seek, offset)
            while piece := await asyncio.to_thread(f.read, PIECE):
                yield piece
        finally:
            f.close()

    async def _model(self, name: str) -> LibraryModel:
        model = await asyncio.to_thread(self._library.find, name)
        if model is None:
            raise InferError(ErrorKind.MODEL_NOT_FOUND, f"this host has no model {name}")
        return model

    async def _sha_of(self, path: Path) -> str:
        stat = await asyncio.to_thread(path.stat)
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._hashed:
            hasher = await asyncio.to_thread(hash_file, path)
            self._hashed[key] = hasher.hexdigest()
        return self._hashed[key]
