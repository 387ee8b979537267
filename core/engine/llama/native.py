"""The thin boundary to llama.cpp's C API: loading, tokens, batches, KV memory.

Everything here is a small, typed wrapper over `llama_cpp`'s ctypes functions; the policy
(which sequence decodes when, what to publish) lives in batch_loop.py, slot_table.py and step.py.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp as llama
import numpy as np

from ...protocol.common import parameter_size
from ...protocol.errors import ErrorKind, InferError
from . import cpu_turns
from .backend import CapturedLog, init_backend, supports_gpu_offload
from .memory import check_context_memory, check_weights_fit
from .sampler import SamplerChain


def check_model_file(path: str, n_gpu_layers: int) -> int:
    """Typed errors for the ways a model file can be wrong before llama.cpp sees it."""
    file = Path(path)
    try:
        found = file.is_file()
    except OSError as exc:  # a name too long, a loop of links: nothing to load either way
        raise InferError(
            ErrorKind.MODEL_FILE_NOT_FOUND, f"cannot use model_path: {exc.strerror}",
            param="model_path",
        ) from None  # fmt: skip
    if not found:
        what = "is a folder, not a GGUF file" if file.is_dir() else "not found"
        raise InferError(
            ErrorKind.MODEL_FILE_NOT_FOUND, f"model file {what}: {path}", param="model_path"
        )
    try:
        with file.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise InferError(
            ErrorKind.MODEL_FILE_NOT_FOUND,
            f"cannot read {path}: {exc.strerror}",
            param="model_path",
        ) from None
    if magic != b"GGUF":
        raise InferError(
            ErrorKind.MODEL_INVALID,
            f"{path} is not a GGUF file",  # its first bytes are nobody's business
            param="model_path",
        )
    size = file.stat().st_size
    check_weights_fit(file.name, size, n_gpu_layers)
    return size


class LlamaModel:
    """A loaded GGUF: weights, vocabulary and metadata."""

    def __init__(
        self, path: str, n_gpu_layers: int, main_gpu: int | None, extra_buffers: bool = False
    ) -> None:
        init_backend()
        self.path = path
        self.file_size = check_model_file(path, n_gpu_layers)
        params = llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # Given a card, the model lives on it alone: llama.cpp's default spreads a model over
        # every GPU by layers (a 70B over two 48 GB cards) and ignores main_gpu.
        if main_gpu is not None:
            params.split_mode = llama.LLAMA_SPLIT_MODE_NONE
            params.main_gpu = main_gpu
        # Repacked CPU weight buffers (AMX and friends) crash llama.cpp 0.3.36 on CPUs that
        # advertise AMX inside sandboxes that do not grant it; plain buffers decode fine.
        params.use_extra_bufts = extra_buffers
        with CapturedLog() as lines:
            ptr = llama.llama_model_load_from_file(os.fsencode(path), params)
        if not ptr:
            reason = last_error(lines) or "llama.cpp could not load it"
            kind = ErrorKind.OUT_OF_MEMORY if out_of_memory(reason) else ErrorKind.MODEL_INVALID
            raise InferError(kind, f"cannot load {Path(path).name}: {reason}", param="model_path")
        self.ptr = ptr
        self.n_gpu_layers = n_gpu_layers
        self.vocab = llama.llama_model_get_vocab(ptr)
        self.n_vocab = int(llama.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(llama.llama_model_n_ctx_train(ptr))
        self.n_layer = int(llama.llama_model_n_layer(ptr))
        self.n_embd = int(llama.llama_model_n_embd(ptr))
        self.n_swa = int(llama.llama_model_n_swa(ptr))  # sliding-window layers' window; 0: none
        # whether a sequence's cells can be cut back to a prefix (not recurrent state)
        self.can_trim = not (
            llama.llama_model_is_recurrent(ptr) or llama.llama_model_is_hybrid(ptr)
        )
        self.add_bos = bool(llama.llama_vocab_get_add_bos(self.vocab))
        self.bos = int(llama.llama_vocab_bos(self.vocab))
        self.eos = int(llama.llama_vocab_eos(self.vocab))
        self.size_bytes = int(llama.llama_model_size(ptr))
        self.architecture = self.meta("general.architecture") or "unknown"
        self.description = self._desc()
        template = llama.llama_model_chat_template(ptr, None)
        self.chat_template: str | None = template.decode("utf-8") if template else None
        self._piece_buf = ctypes.create_string_buffer(256)
        self._pieces: dict[int, bytes] = {}
        self._ends: dict[int, bool] = {}

    @property
    def offloaded_fraction(self) -> float:
        """Share of the layers (and so of the KV cache) that lives on a GPU."""
        if self.n_gpu_layers < 0 or self.n_gpu_layers > self.n_layer:
            return 1.0
        return self.n_gpu_layers / max(1, self.n_layer)

    def kv_bytes_per_sequence(self, n_ctx_seq: int, n_ubatch: int) -> int:
        """KV-cache bytes one sequence of `n_ctx_seq` tokens takes across all layers (f16 K
        and V). Sliding-window layers keep only their window and one ubatch (llama.cpp's
        SWA cache, swa_full off): counted as full layers, a Gemma 3 at 32k tokens seemed to
        need 4-5 times what it does, and --parallel auto gave it that many slots too few."""
        n_head = max(1, int(llama.llama_model_n_head(self.ptr)))
        n_head_kv = int(llama.llama_model_n_head_kv(self.ptr))
        arch = self.architecture
        key = int(self.meta(f"{arch}.attention.key_length") or self.n_embd // n_head)
        value = int(self.meta(f"{arch}.attention.value_length") or self.n_embd // n_head)
        per_cell = n_head_kv * (key + value) * 2
        return per_cell * kv_cells(
            self.n_layer, self.n_swa, self.swa_pattern(), n_ctx_seq, n_ubatch
        )

    def swa_pattern(self) -> int:
        """One layer in this many attends to the whole context, the others to a window; 0
        where not known (all are then counted whole: an upper bound)."""
        if not self.n_swa:
            return 0
        given = self.meta(f"{self.architecture}.attention.sliding_window_pattern")
        if given and given.isdigit():
            return int(given)
        return SWA_PATTERNS.get(self.architecture, 0)

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(512)
        n = llama.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def _desc(self) -> str:
        """llama.cpp's "llama 135M Q4_1", its size counted: llama.cpp names one from the
        layer count, "256M" for SmolLM2-135M's 30 layers."""
        buf = ctypes.create_string_buffer(256)
        llama.llama_model_desc(self.ptr, buf, len(buf))
        arch, _, rest = buf.value.decode("utf-8", "replace").partition(" ")
        quant = rest.partition(" ")[2]
        return f"{arch} {parameter_size(int(llama.llama_model_n_params(self.ptr)))} {quant}"

    def token_text(self, token: int) -> str:
        return bytes(llama.llama_vocab_get_text(self.vocab, token)).decode("utf-8", "replace")

    def tokenize(self, text: str, *, add_bos: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (llama.llama_token * capacity)()
        n = llama.llama_tokenize(
            self.vocab, data, len(data), tokens, capacity, add_bos, parse_special
        )
        if n < 0:  # the buffer was too small; -n is the size needed
            capacity = -n
            tokens = (llama.llama_token * capacity)()
            n = llama.llama_tokenize(
                self.vocab, data, len(data), tokens, capacity, add_bos, parse_special
            )
        return list(tokens[:n])

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of a token sequence (special tokens dropped). Safe on any thread."""
        array = (llama.llama_token * len(tokens))(*tokens)
        size = 8 * len(tokens) + 16
        buf = ctypes.create_string_buffer(size)
        n = llama.llama_detokenize(self.vocab, array, len(tokens), buf, size, True, False)
        if n < 0:  # the buffer was too small (long pieces); -n is the size needed
            size = -n
            buf = ctypes.create_string_buffer(size)
            n = llama.llama_detokenize(self.vocab, array, len(tokens), buf, size, True, False)
        return buf.raw[: max(0, n)].decode("utf-8", "replace")

    def piece(self, token: int) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character). The thread that owns
        the tokens' way out only (the batch loop's; a lone run's reader while it runs: one at
        a time, `_piece_buf` is shared). Remembered per token: the decode loop asks for every
        token it samples, and a call into llama.cpp also hands the GIL to whichever thread
        wants it."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = self._piece_buf
            n = llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            piece = self._pieces[token] = buf.raw[:n]
        return piece

    def is_end_of_generation(self, token: int) -> bool:
        end = self._ends.get(token)
        if end is None:
            end = self._ends[token] = bool(llama.llama_vocab_is_eog(self.vocab, token))
        return end

    def free(self) -> None:
        if self.ptr:
            llama.llama_model_free(self.ptr)
            self.ptr = None


PLAIN_UBATCH = 256  # prompt tokens a graph reads on the CPU without flash attention


class LlamaContext:
    """One llama.cpp context holding `n_seq` sequences of `n_ctx_seq` tokens each, each in a KV
    stream of its own. A decode takes up to `n_batch` prompt tokens plus one token per
    sequence (and `guesses`); each sequence gives one output row per decode (and its
    guesses' rows)."""

    def __init__(
        self,
        model: LlamaModel,
        n_ctx_seq: int,
        n_seq: int,
        n_batch: int,
        n_threads: int,
        flash_attn: int = -1,
        guesses: int = 0,
    ) -> None:
        """`guesses`: tokens a decode may hold beyond n_batch and one per sequence, each with
        a logits row (speculative decoding's, drafts.py)."""
        check_context_memory(model, n_ctx_seq, n_seq, n_batch)
        params = llama.llama_context_default_params()
        params.n_ctx = n_ctx_seq * n_seq
        params.n_seq_max = n_seq
        params.n_batch = n_batch + n_seq + guesses
        # One ubatch holds a token of every sequence, so a decode step is one graph. Prompt
        # tokens beyond that go into further ubatches of up to this size: on the CPU without
        # flash attention, of up to PLAIN_UBATCH, where a long prompt reads faster (its
        # attention scores are an n_kv x ubatch matrix a head; bench/README, session 51).
        plain_cpu = flash_attn == 0 and model.n_gpu_layers == 0
        params.n_ubatch = max(min(n_batch, PLAIN_UBATCH) if plain_cpu else n_batch, n_seq)
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.kv_unified = False  # one KV stream per sequence, as llama-server does by default
        params.swa_full = False  # sliding-window layers keep only their window
        params.flash_attn_type = flash_attn  # -1 auto, 0 off, 1 on
        params.n_outputs_max = n_seq + guesses  # a row per sequence (and guess), not n_batch
        # one: lets samplers in the graph draw without transactions
        params.n_outputs_max_per_seq = 1 + guesses
        params.no_perf = True
        with CapturedLog() as lines:
            ptr = llama.llama_init_from_model(model.ptr, params)
        if not ptr:
            reason = last_error(lines) or "llama.cpp could not create the context"
            raise InferError(
                ErrorKind.OUT_OF_MEMORY,
                f"cannot allocate a context of {n_seq} x {n_ctx_seq} tokens: {reason}",
            )
        self.ptr = ptr
        self._threads = n_threads
        self.flash_attn = flash_attn  # as asked: a draft model's context asks the same
        self._on_cpu = model.n_gpu_layers == 0
        # A CPU build computes within llama_decode; a GPU build may still send a big batch's
        # products to the device, which the outputs then wait for.
        self._synchronous = self._on_cpu and not supports_gpu_offload()
        self.waited_s = 0.0  # the last decode's wait for its turn (cpu_turns.py)
        self.n_seq = n_seq
        self.guesses = guesses
        self.n_ctx_seq = int(llama.llama_n_ctx_seq(ptr))
        self.n_ubatch = int(llama.llama_n_ubatch(ptr))  # tokens of one graph run
        self.memory = llama.llama_get_memory(ptr)
        self.size_mb = _buffer_sizes_mb(lines)

    def set_sampler(self, seq: int, chain: SamplerChain | None) -> bool:
        """Install a chain in the graph for one sequence (None removes the one there). False if
        the device cannot run it; the chain then samples on the host. A chain can be installed
        once only in its life (llama.cpp asserts), and the next decode re-plans the graph."""
        ok = bool(llama.llama_set_sampler(self.ptr, seq, chain.ptr if chain else None))
        if chain is not None:
            chain.on_backend = ok
        return ok

    def decode(self, batch: Batch) -> int:
        """Start a decode; on a GPU it runs on after this returns (see `synchronize`)."""
        rc, self.waited_s = cpu_turns.decode(self.ptr, batch.raw, self._on_cpu, self._threads)
        return rc

    def takes_turns(self) -> bool:
        """Whether its decodes take turns with other engines' on the CPU (cpu_turns.py)."""
        return cpu_turns.takes_turns(self._on_cpu)

    def synchronize(self) -> None:
        """Wait for the last decode's outputs (reading any of them waits as well). On a CPU
        build they are there: no call (each lets go of the GIL between two decodes, see
        short_calls.py)."""
        if not self._synchronous:
            llama.llama_synchronize(self.ptr)

    def free_sequence(self, seq: int) -> None:
        """Drop every KV cell of the sequence (removing a whole sequence never fails)."""
        llama.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def trim_sequence(self, seq: int, n: int) -> bool:
        """Keep the first `n` cells of a sequence. False, with all of them gone, where the
        memory cannot drop a tail (recurrent models)."""
        if llama.llama_memory_seq_rm(self.memory, seq, n, -1):
            return True
        llama.llama_memory_seq_rm(self.memory, seq, -1, -1)
        return False

    def copy_prefix(self, src: int, dst: int, n: int) -> bool:
        """Give sequence `dst` the first `n` cells of `src`. Across KV streams llama.cpp copies
        a whole stream (at the next decode), so the rest is dropped after. False, with `dst`
        left empty, where the memory cannot drop a tail (recurrent models)."""
        llama.llama_memory_seq_rm(self.memory, dst, -1, -1)
        llama.llama_memory_seq_cp(self.memory, src, dst, -1, -1)
        if llama.llama_memory_seq_rm(self.memory, dst, n, -1):
            return True
        llama.llama_memory_seq_rm(self.memory, dst, -1, -1)
        return False

    def sequence_length(self, seq: int) -> int:
        """Cells the sequence holds; 0 once it is free."""
        return int(llama.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def free(self) -> None:
        if self.ptr:
            llama.llama_free(self.ptr)
            self.ptr = None


class Batch:
    """A reusable llama_batch over numpy arrays we own: a step's tokens are written with a few
    slice assignments instead of six ctypes stores per token."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        self._n_seq_id = np.ones(capacity, dtype=np.int32)
        # llama_batch.seq_id is an array of pointers, one per token, each to its sequence ids
        seq_base = self.seq.ctypes.data
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * capacity)(
            *(
                ctypes.cast(seq_base + 4 * i, ctypes.POINTER(ctypes.c_int32))
                for i in range(capacity)
            )
        )
        raw: Any = llama.llama_batch()  # pointers into the arrays above
        raw.token = self.token.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.embd = None
        raw.pos = self.pos.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.n_seq_id = self._n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)))
        raw.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        raw.n_tokens = 0
        self.raw = raw
        self.n = 0

    def clear(self) -> None:
        self.n = 0
        self.raw.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token; returns its index in the batch (used to sample its logits)."""
        i = self.n
        self.token[i], self.pos[i], self.seq[i], self.logits[i] = token, pos, seq, logits
        self.n = self.raw.n_tokens = i + 1
        return i

    def fill(
        self,
        tokens: Sequence[int],
        positions: Sequence[int],
        seqs: Sequence[int],
        logits: Sequence[int],
    ) -> None:
        """Replace the batch's contents in one go (four equally long sequences)."""
        n = len(tokens)
        if n <= 4:  # (a stream's step: item stores cost a tenth of a slice's conversion)
            for i in range(n):
                self.token[i], self.pos[i] = tokens[i], positions[i]
                self.seq[i], self.logits[i] = seqs[i], logits[i]
        else:
            self.token[:n] = tokens
            self.pos[:n] = positions
            self.seq[:n] = seqs
            self.logits[:n] = logits
        self.n = self.raw.n_tokens = n

    def free(self) -> None:
        """Nothing to free: numpy owns the memory (kept for symmetry with the context)."""


_SIZE = re.compile(r"(?:KV|kv_cache|compute buffer|RS).*?size\s*=\s*([\d.]+)\s*MiB")


def _buffer_sizes_mb(lines: list[str]) -> float:
    """Context memory as llama.cpp reports it while allocating (KV cache + compute buffers)."""
    return round(sum(float(m.group(1)) for line in lines if (m := _SIZE.search(line))), 1)


# llama.cpp's own patterns where the GGUF does not give one (src/models/*.cpp, load_swa_pattern)
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "gemma-embedding": 6, "cohere2": 4,
                "llama4": 4, "gpt-oss": 2, "exaone4": 4, "olmo2": 4}  # fmt: skip


def kv_cells(n_layer: int, n_swa: int, pattern: int, n_ctx_seq: int, n_ubatch: int) -> int:
    """KV cells one sequence holds over all layers: each full layer its context, each
    sliding-window layer its window and a ubatch (padded to 256, as llama.cpp pads it)."""
    if not n_swa or not pattern:
        return n_layer * n_ctx_seq
    n_full = -(-n_layer // pattern)
    window = -(-min(n_ctx_seq, n_swa + n_ubatch) // 256) * 256
    return n_full * n_ctx_seq + (n_layer - n_full) * window


# llama.cpp's words for a failed allocation (not "alloc" alone: every load logs "no_alloc = 0")
_OUT_OF_MEMORY = ("failed to allocate", "unable to allocate", "out of memory", "cudamalloc")


def last_error(lines: list[str]) -> str | None:
    """Why llama.cpp failed, from its log: a memory failure wherever it was said (its last
    line is only "failed to load model" after "unable to allocate CUDA0 buffer"), else the
    last line that says error or fail."""
    said = [line.strip() for line in lines]
    for text in reversed(said):
        if out_of_memory(text):
            return text.split(": ", 1)[-1]
    for text in reversed(said):
        if "error" in text.lower() or "fail" in text.lower():
            return text.split(": ", 1)[-1]
    return None


def out_of_memory(reason: str) -> bool:
    return any(marker in reason.lower() for marker in _OUT_OF_MEMORY)


def address_of(pointer: ctypes._Pointer[ctypes.c_float]) -> int:
    return ctypes.addressof(pointer.contents)


def floats_at(address: int, n: int) -> np.ndarray:
    """The n floats at an address (logits llama.cpp holds), as an array that reads them in
    place: a fifth of what np.ctypeslib.as_array costs."""
    return np.frombuffer(memoryview((ctypes.c_float * n).from_address(address)), np.float32)


def release_freed_heap() -> None:
    """Hand memory freed by an unloaded model back to the system. glibc keeps freed heap in
    its arenas, so without this each reload left ~25-40 MB resident until it plateaued near
    100 MB (bench/probe_hostile.py). No-op off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
