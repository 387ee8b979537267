"""llama.cpp's process-wide state: one backend initialisation, and its log lines routed into
`logging` so that they never land on a terminal the TUI owns.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

import llama_cpp as llama

log = logging.getLogger("infertui.llama_cpp")

# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line.
# llama.cpp's info chatter is DEBUG to us; its warnings and errors keep their level.
_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
# Warnings of what the host chose on purpose: DEBUG too (embedder.py pools a GGUF that says
# no pooling by the mean, and llama.cpp warns at each first embedding)
_CHOSEN = ("llama_init_from_model: model default pooling_type is [-1]",)
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
        chosen = stripped.startswith(_CHOSEN)
        log.log(logging.DEBUG if chosen else _LEVELS.get(level, logging.DEBUG), "%s", stripped)


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


def idle_nvidia_gpu() -> bool:
    """An NVIDIA GPU the driver sees, with a llama.cpp built without CUDA: every layer runs on
    the CPU, which people take for a slow GPU unless told."""
    try:
        with os.scandir("/proc/driver/nvidia/gpus") as entries:
            cards = any(entries)
    except OSError:
        return False
    return cards and not supports_gpu_offload()


def system_info() -> str:
    init_backend()
    return bytes(llama.llama_print_system_info()).decode("utf-8", "replace")


def engine_version() -> str:
    return f"llama.cpp (llama-cpp-python {llama.__version__})"


class CapturedLog:
    """Collects llama.cpp's log lines printed on this thread (sizes of buffers, errors)."""

    def __enter__(self) -> list[str]:
        _capture.lines = []
        return _capture.lines  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        _capture.lines = None
