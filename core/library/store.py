"""The library: pulled models in the data dir's `models/`, one folder per full name
(`HOST/NAMESPACE/MODEL/TAG/`, the GGUF's own file names inside, so that llama.cpp finds the
parts of a split one), each with a `manifest.json` written last: a folder without one is a
pull still going, or stopped, and is not listed. The GGUFs of the configured model folders
are listed too, by their file's stem, and are not the library's to remove."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol.errors import ErrorKind, InferError
from .names import ModelName, parse_name, same_model
from .sources import Plan

MANIFEST = "manifest.json"


@dataclass
class LibraryModel:
    name: str  # what requests name it by (Ollama's short form, or a folder GGUF's stem)
    path: Path  # the GGUF to load (a split one's first part)
    size: int  # bytes, all parts
    modified: float
    sha256: str | None = None
    source: str = "folder"  # hf, ollama, url, or folder (a configured model folder's GGUF)
    origin: str = ""
    layers: dict[str, Any] = field(default_factory=dict)

    @property
    def removable(self) -> bool:
        return self.source != "folder"


class Library:
    def __init__(self, root: Path, folders: Sequence[Path] = ()) -> None:
        self.root = root
        self.folders = [f for f in folders if f.resolve() != root.resolve()]

    def folder_of(self, name: ModelName) -> Path:
        return self.root / name.host / name.namespace / name.model / name.tag

    def models(self) -> list[LibraryModel]:
        found = [self._read(m.parent) for m in sorted(self.root.glob(f"*/*/*/*/{MANIFEST}"))]
        names = {m.name for m in found}
        for folder in self.folders:
            for path in sorted(folder.glob("*.gguf")) if folder.is_dir() else ():
                if path.stem not in names and "-of-0" not in path.stem:
                    names.add(path.stem)
                    stat = path.stat()
                    found.append(LibraryModel(path.stem, path, stat.st_size, stat.st_mtime))
        return found

    def find(self, text: str) -> LibraryModel | None:
        """A model by any form of its name (`llama3.2`, `llama3.2:latest`, the full one), or
        a folder GGUF by its stem."""
        try:
            folder = self.folder_of(parse_name(text))
        except InferError:
            folder = None
        if folder is not None and (folder / MANIFEST).is_file():
            return self._read(folder)
        models = self.models()
        exact = next((m for m in models if m.name == text), None)
        return exact or next((m for m in models if same_model(m.name, text)), None)

    def get(self, text: str) -> LibraryModel:
        model = self.find(text)
        if model is None:
            raise InferError(ErrorKind.MODEL_NOT_FOUND, f"no model {text} in the library")
        return model

    def record(self, name: ModelName, plan: Plan, hashes: Sequence[str]) -> LibraryModel:
        """Write the manifest of a pull whose files are all in place and verified."""
        folder = self.folder_of(name)
        manifest = {
            "name": name.full,
            "short": name.short,
            "source": name.source,
            "origin": plan.origin,
            "files": [
                {"name": f.name, "sha256": sha, "size": (folder / f.name).stat().st_size}
                for f, sha in zip(plan.files, hashes, strict=True)
            ],
            "layers": plan.layers,
            "pulled": time.time(),
        }
        _write_json(folder / MANIFEST, manifest)
        return self._read(folder)

    def remove(self, text: str) -> LibraryModel:
        model = self.get(text)
        if not model.removable:
            raise InferError(
                ErrorKind.FORBIDDEN,
                f"{model.name} is a file of a configured model folder ({model.path.parent}), "
                "not the library's to remove",
            )
        self.discard(model.path.parent)
        return model

    def discard(self, folder: Path) -> None:
        """A model's folder, and the folders of its name left empty (never the root)."""
        shutil.rmtree(folder, ignore_errors=True)
        for parent in folder.parents:
            if parent == self.root or not parent.is_relative_to(self.root):
                break
            try:
                parent.rmdir()
            except OSError:
                break

    def copy(self, source: str, destination: str) -> LibraryModel:
        """The model under another name too: its files hard-linked (copied across devices)."""
        model = self.get(source)
        name = parse_name(destination)
        target = self.folder_of(name)
        if (target / MANIFEST).exists():
            raise InferError(ErrorKind.CONFLICT, f"{name.short} is already in the library")
        target.mkdir(parents=True, exist_ok=True)
        manifest = self.manifest(model)
        for entry in manifest["files"]:
            for file in (entry["name"], entry["name"] + ".sha256"):  # with what it was checked by
                src, dst = model.path.parent / file, target / file
                if not src.exists():
                    continue
                dst.unlink(missing_ok=True)
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copy2(src, dst)
        source = "local" if model.source == "folder" else manifest["source"]
        manifest.update(name=name.full, short=name.short, source=source, pulled=time.time())
        _write_json(target / MANIFEST, manifest)
        return self._read(target)

    def manifest(self, model: LibraryModel) -> dict[str, Any]:
        """What the model was filed with: its files (name, sha256, size), source and layers."""
        if model.source != "folder":
            return dict(json.loads((model.path.parent / MANIFEST).read_text("utf-8")))
        return {"files": [{"name": model.path.name, "sha256": None, "size": model.size}],
                "source": "folder", "origin": str(model.path), "layers": {}}  # fmt: skip

    def _read(self, folder: Path) -> LibraryModel:
        manifest = json.loads((folder / MANIFEST).read_text("utf-8"))
        files = manifest["files"]
        return LibraryModel(
            name=manifest["short"],
            path=folder / files[0]["name"],
            size=sum(f["size"] for f in files),
            modified=manifest.get("pulled", 0.0),
            sha256=files[0]["sha256"],
            source=manifest["source"],
            origin=manifest.get("origin", ""),
            layers=manifest.get("layers", {}),
        )


def _write_json(path: Path, value: Any) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    partial.write_text(json.dumps(value, indent=1), "utf-8")
    partial.replace(path)
