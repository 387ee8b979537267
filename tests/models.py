"""Test models made from the bundled one: cheaper to run where a test's claim holds for any
model (the engine's batching, scheduling and sampling), never where it is about what the model
says."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gguf

CUT_LAYERS = 2


def cut_model(source: Path, layers: int = CUT_LAYERS) -> Path:
    """`source` (a llama-architecture GGUF) cut to its first `layers` blocks: the same
    tokenizer, chat template, quantized weights and attention heads, so the same kernels and
    the same prompts, at about a tenth of SmolLM2's cost per token (its 30 blocks are most of
    it). Made once per machine for a given source file, in the temp folder."""
    stat = source.stat()
    folder = Path(tempfile.gettempdir()) / "infertui-tests"
    path = folder / f"{source.stem}-{stat.st_size}-{stat.st_mtime_ns}-{layers}-blocks.gguf"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    reader = gguf.GGUFReader(str(source))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(partial), arch=arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = layers if field.name == f"{arch}.block_count" else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    kept = [
        t for t in reader.tensors
        if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < layers
    ]  # fmt: skip
    for tensor in kept:
        data = tensor.data
        writer.add_tensor_info(tensor.name, data.shape, data.dtype, data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    os.replace(partial, path)
    return path


def tiny_gguf(path: Path, *, file_type: int = 15, megabytes: float = 3.0) -> Path:
    """A GGUF that says what a library lists (architecture, quantisation, context length,
    licence, chat template) over one tensor of random bytes, so that a changed byte changes
    its sha256. Not loadable: for pulls, which never load what they fetch."""
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_uint32("general.file_type", file_type)
    writer.add_uint32("llama.context_length", 2048)
    writer.add_string("general.license", "apache-2.0")
    writer.add_string(
        "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    count = int(megabytes * (1 << 20)) // 4
    weights = np.random.default_rng(int(megabytes * 1000) + file_type).random(count, np.float32)
    writer.add_tensor("token_embd.weight", weights)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
