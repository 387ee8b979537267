"""The thin boundary to llama.cpp's C API: loading, tokens, batches, KV memory.

Everything here is a small, typed wrapper over `llama_cpp`'s ctypes functions; the policy
(which sequence decodes when, what to publish) lives in batch_loop.py. llama.cpp's own log
output is routed into `logging` so that it never lands on a terminal the TUI owns.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from pathlib import Path

import llama_cpp as llama

from ..protocol.errors import ErrorKind, InferError

log = logging.getLogger("infertui.llama_cpp")

# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line.
# llama.cpp's info chatter is DEBUG to us; its warnings and errors keep their level.
_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_capture = threading.local()
_init_lock = threading.Lock()
_initialised = False


@llama.llama_log_callback  # type: ignore[untyped-decorator]
def _on_llama_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    line = text.decode("utf-8", "replace")
    lines: list[str] | None = getattr(_capture, "lines", None)
    if lines is not None:
        lines.append(line)
    stripped = line.rstrip()
    if stripped:
        log.log(_LEVELS.get(level, logging.DEBUG), "%s", stripped)


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its logs into `logging`."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        llama.llama_log_set(_on_llama_log, ctypes.c_void_p(0))
        llama.llama_backend_init()
        _initialised = True


def supports_gpu_offload() -> bool:
    init_backend()
    return bool(llama.llama_supports_gpu_offload())


def system_info() -> str:
    init_backend()
    return bytes(llama.llama_print_system_info()).decode("utf-8", "replace")


def engine_version() -> str:
    return f"llama.cpp (llama-cpp-python {llama.__version__})"


class _CapturedLog:
    """Collects llama.cpp's log lines printed on this thread (sizes of buffers, errors)."""

    def __enter__(self) -> list[str]:
        _capture.lines = []
        return _capture.lines  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        _capture.lines = None


def _available_memory_mb() -> float | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def check_model_file(path: str, n_gpu_layers: int) -> int:
    """Typed errors for the ways a model file can be wrong before llama.cpp sees it."""
    file = Path(path)
    if not file.is_file():
        raise InferError(
            ErrorKind.MODEL_FILE_NOT_FOUND, f"model file not found: {path}", param="model_path"
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
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')",
            param="model_path",
        )
    size = file.stat().st_size
    available = _available_memory_mb()
    if n_gpu_layers == 0 and available is not None and size / 2**20 > available * 0.95:
        raise InferError(
            ErrorKind.OUT_OF_MEMORY,
            f"{file.name} needs about {size / 2**20:.0f} MiB but only {available:.0f} MiB is free",
        )
    return size


class LlamaModel:
    """A loaded GGUF: weights, vocabulary and metadata."""

    def __init__(
        self, path: str, n_gpu_layers: int, main_gpu: int, extra_buffers: bool = False
    ) -> None:
        init_backend()
        self.path = path
        self.file_size = check_model_file(path, n_gpu_layers)
        params = llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.main_gpu = main_gpu
        # Repacked CPU weight buffers (AMX and friends) crash llama.cpp 0.3.36 on CPUs that
        # advertise AMX inside sandboxes that do not grant it; plain buffers decode fine.
        params.use_extra_bufts = extra_buffers
        with _CapturedLog() as lines:
            ptr = llama.llama_model_load_from_file(os.fsencode(path), params)
        if not ptr:
            reason = _last_error(lines) or "llama.cpp could not load it"
            kind = ErrorKind.OUT_OF_MEMORY if "alloc" in reason.lower() else ErrorKind.MODEL_INVALID
            raise InferError(kind, f"cannot load {Path(path).name}: {reason}", param="model_path")
        self.ptr = ptr
        self.n_gpu_layers = n_gpu_layers
        self.vocab = llama.llama_model_get_vocab(ptr)
        self.n_vocab = int(llama.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(llama.llama_model_n_ctx_train(ptr))
        self.add_bos = bool(llama.llama_vocab_get_add_bos(self.vocab))
        self.bos = int(llama.llama_vocab_bos(self.vocab))
        self.eos = int(llama.llama_vocab_eos(self.vocab))
        self.size_bytes = int(llama.llama_model_size(ptr))
        self.architecture = self.meta("general.architecture") or "unknown"
        self.description = self._desc()
        template = llama.llama_model_chat_template(ptr, None)
        self.chat_template: str | None = template.decode("utf-8") if template else None
        self._piece_buf = ctypes.create_string_buffer(256)

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes across all layers (f16 K and V; an upper bound for
        models with sliding-window layers, which keep only their window)."""
        n_layer = int(llama.llama_model_n_layer(self.ptr))
        n_head = max(1, int(llama.llama_model_n_head(self.ptr)))
        n_head_kv = int(llama.llama_model_n_head_kv(self.ptr))
        n_embd = int(llama.llama_model_n_embd(self.ptr))
        arch = self.architecture
        key = int(self.meta(f"{arch}.attention.key_length") or n_embd // n_head)
        value = int(self.meta(f"{arch}.attention.value_length") or n_embd // n_head)
        return n_layer * n_head_kv * (key + value) * 2

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(512)
        n = llama.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def _desc(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

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

    def piece(self, token: int) -> bytes:
        """The raw bytes of one token (may be part of a UTF-8 character). Engine thread only."""
        buf = self._piece_buf
        n = llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama.llama_vocab_is_eog(self.vocab, token))

    def free(self) -> None:
        if self.ptr:
            llama.llama_model_free(self.ptr)
            self.ptr = None


class LlamaContext:
    """One llama.cpp context holding `n_seq` sequences of `n_ctx_seq` tokens each."""

    def __init__(
        self,
        model: LlamaModel,
        n_ctx_seq: int,
        n_seq: int,
        n_batch: int,
        n_threads: int,
        flash_attn: int = -1,
    ) -> None:
        _check_context_memory(model, n_ctx_seq * n_seq)
        params = llama.llama_context_default_params()
        params.n_ctx = n_ctx_seq * n_seq
        params.n_seq_max = n_seq
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.kv_unified = False  # one KV stream per sequence, as llama-server does by default
        params.swa_full = False  # sliding-window layers keep only their window
        params.flash_attn_type = flash_attn  # -1 auto, 0 off, 1 on
        params.n_outputs_max = n_seq  # one logits row per sequence per step, not n_batch rows
        params.no_perf = True
        with _CapturedLog() as lines:
            ptr = llama.llama_init_from_model(model.ptr, params)
        if not ptr:
            reason = _last_error(lines) or "llama.cpp could not create the context"
            raise InferError(
                ErrorKind.OUT_OF_MEMORY,
                f"cannot allocate a context of {n_seq} x {n_ctx_seq} tokens: {reason}",
            )
        self.ptr = ptr
        self.n_seq = n_seq
        self.n_ctx_seq = int(llama.llama_n_ctx_seq(ptr))
        self.memory = llama.llama_get_memory(ptr)
        self.size_mb = _buffer_sizes_mb(lines)

    def decode(self, batch: Batch) -> int:
        return int(llama.llama_decode(self.ptr, batch.raw))

    def free_sequence(self, seq: int) -> None:
        """Drop every KV cell of the sequence (removing a whole sequence never fails)."""
        llama.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def sequence_length(self, seq: int) -> int:
        """Cells the sequence holds; 0 once it is free."""
        return int(llama.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def free(self) -> None:
        if self.ptr:
            llama.llama_free(self.ptr)
            self.ptr = None


class Batch:
    """A reusable llama_batch: tokens for many sequences, filled anew each step."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw = llama.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        self.n = 0
        self.raw.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token; returns its index in the batch (used to sample its logits)."""
        i = self.n
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = logits
        self.n = i + 1
        raw.n_tokens = self.n
        return i

    def free(self) -> None:
        if self.raw is not None:
            llama.llama_batch_free(self.raw)
            self.raw = None


def _check_context_memory(model: LlamaModel, n_cells: int) -> None:
    """Refuse a context that cannot fit in RAM: llama.cpp would allocate it anyway and the
    kernel would kill the whole host when the pages are touched."""
    if model.n_gpu_layers != 0:
        return  # the KV cache lives on the GPU, whose allocator fails cleanly
    available = _available_memory_mb()
    needed = model.kv_bytes_per_token() * n_cells / 2**20
    if available is not None and needed > available * 0.9:
        raise InferError(
            ErrorKind.OUT_OF_MEMORY,
            f"a context of {n_cells} tokens needs up to {needed:,.0f} MiB of KV cache but only "
            f"{available:,.0f} MiB of memory is free; lower n_ctx or the number of slots",
            param="n_ctx",
        )


_SIZE = re.compile(r"(?:KV|kv_cache|compute buffer|RS).*?size\s*=\s*([\d.]+)\s*MiB")


def _buffer_sizes_mb(lines: list[str]) -> float:
    """Context memory as llama.cpp reports it while allocating (KV cache + compute buffers)."""
    return round(sum(float(m.group(1)) for line in lines if (m := _SIZE.search(line))), 1)


def _last_error(lines: list[str]) -> str | None:
    for line in reversed(lines):
        text = line.strip()
        if "error" in text.lower() or "fail" in text.lower():
            return text.split(": ", 1)[-1]
    return None
