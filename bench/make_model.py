"""Write a random-weight, Llama-shaped GGUF so that any machine can measure without downloads.

    .venv/bin/python bench/make_model.py OUT.gguf --shape tiny --vocab 128256 [--type q4_k_m]

The decode cost of a random model equals that of a trained one of the same shape; its text is
noise. The weights are written in F16 with the `gguf` package, then quantized by llama.cpp's
own `llama_model_quantize` (no llama-quantize binary needed). Shapes:

    tiny  2 layers, 256 wide (the CPU reference: cheap layers, a full-size vocabulary)
    1b    16 layers, 2048 wide (Llama 3.2 1B)
    8b    32 layers, 4096 wide (Llama 3 8B)
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

SHAPES = {  # hidden, layers, feed-forward, heads, kv heads
    "tiny": (256, 2, 512, 4, 2),
    "1b": (2048, 16, 8192, 32, 8),
    "8b": (4096, 32, 14336, 32, 8),
}
POOL = (1 << 24) + 1  # odd: see write_f16
QUANT_TYPES = {"f16": 1, "q8_0": 7, "q4_k_m": 15}  # llama_ftype values

log = logging.getLogger("make_model")


def synthetic_vocab(size: int) -> list[str]:
    """An SPM-style vocabulary: specials, the 256 byte tokens, printable characters, their
    pairs, then filler words up to `size`."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    chars = [chr(c) for c in range(33, 127)] + ["\u2581"]
    tokens += chars
    seen = set(tokens)
    for a in chars:
        for b in chars:
            if len(tokens) >= size:
                break
            if (pair := a + b) not in seen:
                tokens.append(pair)
                seen.add(pair)
    tokens += [f"\u2581w{i}" for i in range(size - len(tokens))]
    return tokens[:size]


def write_f16(out: Path, shape: str, vocab_size: int) -> None:
    import gguf  # a dev dependency: only this helper needs it

    hidden, layers, ffn, heads, kv_heads = SHAPES[shape]
    head_dim = hidden // heads
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(f"random-llama-{shape}-v{vocab_size}")
    writer.add_context_length(8192)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_vocab_size(vocab_size)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    tokens = synthetic_vocab(vocab_size)
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab_size - 259)  # unknown, control, byte, normal
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 3 + [-float(i) for i in range(vocab_size - 3)])
    writer.add_token_types(types[:vocab_size])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)

    # Rows are slices of one pool of random numbers: an 8B model's worth of fresh ones would
    # take minutes to draw, and the values do not matter for speed. The pool's odd length
    # makes every row of a matrix start at a different place, so no two rows are equal (equal
    # rows would make ties that greedy sampling may break either way).
    pool = (np.random.default_rng(0).standard_normal(POOL, dtype=np.float32) * 0.02).astype(
        np.float16
    )
    shift = 0

    def weights(rows: int, cols: int) -> np.ndarray:
        nonlocal shift
        shift += 104_729
        return np.resize(np.roll(pool, shift) if rows * cols < POOL else pool, (rows, cols))

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab_size, hidden))
    writer.add_tensor("output_norm.weight", ones(hidden))
    writer.add_tensor("output.weight", weights(vocab_size, hidden))
    for layer in range(layers):
        p = f"blk.{layer}."
        writer.add_tensor(p + "attn_norm.weight", ones(hidden))
        writer.add_tensor(p + "attn_q.weight", weights(heads * head_dim, hidden))
        writer.add_tensor(p + "attn_k.weight", weights(kv_heads * head_dim, hidden))
        writer.add_tensor(p + "attn_v.weight", weights(kv_heads * head_dim, hidden))
        writer.add_tensor(p + "attn_output.weight", weights(hidden, heads * head_dim))
        writer.add_tensor(p + "ffn_norm.weight", ones(hidden))
        writer.add_tensor(p + "ffn_gate.weight", weights(ffn, hidden))
        writer.add_tensor(p + "ffn_up.weight", weights(ffn, hidden))
        writer.add_tensor(p + "ffn_down.weight", weights(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quantize(src: Path, out: Path, ftype: int) -> None:
    import llama_cpp as llama

    from infertui.core.engine.llama.backend import init_backend

    init_backend()  # llama.cpp's log lines go through `logging`

    params = llama.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = os.cpu_count() or 1
    if llama.llama_model_quantize(os.fsencode(src), os.fsencode(out), params) != 0:
        raise SystemExit(f"llama_model_quantize failed for {src}")


def make_model(out: Path, shape: str, vocab: int, quant: str = "q4_k_m") -> Path:
    """Write the model unless a file of that name exists already; returns its path."""
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    if quant == "f16":
        write_f16(out, shape, vocab)
        return out
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        f16 = Path(tmp) / "f16.gguf"
        write_f16(f16, shape, vocab)
        quantize(f16, out, QUANT_TYPES[quant])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--type", choices=sorted(QUANT_TYPES), default="q4_k_m")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make_model(args.out, args.shape, args.vocab, args.type)
    log.info("wrote %s (%.1f MiB)", args.out, args.out.stat().st_size / 2**20)


if __name__ == "__main__":
    main()
