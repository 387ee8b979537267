"""What a library model's GGUF says of itself, read from its header without loading it: for
`infertui list` and `show`, and Ollama's /api/tags and /api/show."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..engine.chat_format import template_thinks, tool_format
from ..library import LibraryModel
from ..library.gguf_header import GgufHeader, read_header
from ..protocol.common import parameter_size
from ..protocol.snapshots import LibraryEntry


@dataclass(frozen=True)
class ModelFacts:
    architecture: str = "unknown"
    parameters: int = 0
    quantization: str = ""
    context_length: int | None = None
    license: str = ""
    template: str | None = None  # the GGUF's Jinja chat template
    tool_format: str = ""  # the tool-call format the template writes
    thinks: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)  # the GGUF's, then the registry's
    metadata: dict[str, Any] = field(default_factory=dict)  # scalars only (no vocabulary)
    readable: bool = True

    @property
    def parameter_size(self) -> str:
        return parameter_size(self.parameters)


def facts_of(model: LibraryModel) -> ModelFacts:
    """The model's facts; a file that is not readable GGUF gives `readable=False`."""
    return file_facts(model.path, model.layers)


def file_facts(path: Path, layers: Mapping[str, Any] = MappingProxyType({})) -> ModelFacts:
    """A GGUF's facts, with a library entry's `layers` (its registry's params and license)
    where it has them; a file that is not readable GGUF gives `readable=False`."""
    try:
        stat = path.stat()
        header = _header(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError):
        return ModelFacts(readable=False)
    meta = header.metadata
    template = meta.get("tokenizer.chat_template")
    template = template if isinstance(template, str) else None
    sampling = {key.removeprefix("general.sampling."): value for key, value in meta.items()
                if key.startswith("general.sampling.")}  # fmt: skip
    sampling.update(layers.get("params") or {})
    return ModelFacts(
        architecture=header.architecture or "unknown",
        parameters=header.parameters,
        quantization=header.quantization or "",
        context_length=header.context_length,
        license=str(meta.get("general.license") or layers.get("license") or ""),
        template=template,
        tool_format=tool_format(template) if template else "",
        thinks=template_thinks(template),
        sampling=sampling,
        metadata={key: value for key, value in meta.items() if _small(value)},
    )


def entry_of(model: LibraryModel, loaded: bool) -> LibraryEntry:
    """The model as the faces list it (/v1/host/library, P2P `library`, the apps)."""
    facts = facts_of(model)
    return LibraryEntry(
        name=model.name, size=model.size, architecture=facts.architecture,
        parameters=facts.parameter_size, quantization=facts.quantization,
        context_length=facts.context_length, modified=model.modified, source=model.source,
        loaded=loaded,
    )  # fmt: skip


def _small(value: Any) -> bool:
    """A scalar worth showing: not a vocabulary, a merge list or a template."""
    if isinstance(value, str):
        return len(value) < 256 and not value.startswith("[")  # "[151936 items]": read past
    return not isinstance(value, list)


@functools.lru_cache(maxsize=64)
def _header(path: str, mtime_ns: int, size: int) -> GgufHeader:
    """Read once per version of a file: a 150k-token vocabulary takes ~0.1 s to walk past."""
    del mtime_ns, size  # the cache's key: a file pulled again is read again
    return read_header(Path(path))
