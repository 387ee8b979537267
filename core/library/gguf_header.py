"""A GGUF file's metadata and parameter count, read from its header alone (no weights), for
`infertui list` and `show` without loading the model."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

# llama.cpp's LLAMA_FTYPE_* values, as `general.file_type` stores them
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE",
}  # fmt: skip

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
_LONG_ARRAY = 64  # a tokenizer's vocabulary is read past, not kept


@dataclass
class GgufHeader:
    metadata: dict[str, Any] = field(default_factory=dict)
    parameters: int = 0

    def get(self, key: str) -> Any:
        return self.metadata.get(key)

    @property
    def architecture(self) -> str | None:
        arch = self.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def quantization(self) -> str | None:
        file_type = self.get("general.file_type")
        return FILE_TYPES.get(file_type, str(file_type)) if file_type is not None else None

    @property
    def context_length(self) -> int | None:
        length = self.get(f"{self.architecture}.context_length")
        return length if isinstance(length, int) else None

    def number(self, key: str) -> int:
        """An architecture's number (`block_count`, ...), the largest where it is per layer;
        0 where the GGUF has none."""
        value = self.get(f"{self.architecture}.{key}")
        if isinstance(value, list):
            value = max((v for v in value if isinstance(v, int)), default=0)
        return value if isinstance(value, int) else 0

    def kv_bytes(self, cells: int) -> int:
        """An f16 KV cache of `cells` tokens over every layer; sliding-window layers counted
        whole, so an upper bound."""
        heads = max(1, self.number("attention.head_count"))
        per_head = self.number("embedding_length") // heads
        key = self.number("attention.key_length") or per_head
        value = self.number("attention.value_length") or per_head
        heads_kv = self.number("attention.head_count_kv") or heads
        return cells * self.number("block_count") * heads_kv * (key + value) * 2


def read_header(path: Path) -> GgufHeader:
    """Raises ValueError for a file that is not GGUF (or is cut short in its header)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path.name} is not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", _exact(f, 20))
        if version < 2:
            raise ValueError(f"{path.name} is GGUF version {version}, too old")
        header = GgufHeader()
        for _ in range(n_kv):
            key = _string(f)
            header.metadata[key] = _value(f, struct.unpack("<I", _exact(f, 4))[0])
        for _ in range(n_tensors):
            _string(f)
            (n_dims,) = struct.unpack("<I", _exact(f, 4))
            count = 1
            for dim in struct.unpack(f"<{n_dims}Q", _exact(f, 8 * n_dims)):
                count *= dim
            _exact(f, 12)  # type, offset
            header.parameters += count
        return header


def _exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("the GGUF header is cut short")
    return data


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", _exact(f, 8))
    return _exact(f, n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, _exact(f, struct.calcsize(fmt)))[0]
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item_kind, n = struct.unpack("<IQ", _exact(f, 12))
        items = [_value(f, item_kind) for _ in range(n)]
        return items if n <= _LONG_ARRAY else f"[{n} items]"
    raise ValueError(f"unknown GGUF value type {kind}")
