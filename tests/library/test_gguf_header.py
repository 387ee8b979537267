"""The library's GGUF header reader (core/library/gguf_header.py) against the `gguf` package's
own reader, on the bundled model: the same metadata and parameter count, a vocabulary stepped
over, and a file cut short in its header refused."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from infertui.core.library.gguf_header import read_header


def test_it_reads_what_the_gguf_package_reads(model_path: Path) -> None:
    header = read_header(model_path)
    reader = gguf.GGUFReader(str(model_path))
    assert header.parameters == sum(int(t.n_elements) for t in reader.tensors)
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue  # the reader's own (version, counts)
        ours = header.metadata[field.name]
        if field.types[0] == gguf.GGUFValueType.ARRAY and len(field.data) > 64:
            assert ours == f"[{len(field.data)} items]"  # a vocabulary: stepped over
        else:
            assert ours == field.contents(), field.name
    assert header.architecture == "llama" and header.context_length == 8192
    # an f16 K and V per layer and cell: SmolLM2 135M has 30 layers of 3 KV heads of 64
    assert header.kv_bytes(1024) == 1024 * 30 * 3 * (64 + 64) * 2


def test_a_file_cut_short_in_its_header_is_refused(model_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_path.read_bytes()[:200_000])  # inside the vocabulary
    with pytest.raises(ValueError, match="cut short"):
        read_header(cut)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="not a GGUF"):
        read_header(empty)
