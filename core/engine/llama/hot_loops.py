"""Where the host's C loops are (hot_loops.c, fast_rows.c, lone_run.c, built by the install
into one library), and the addresses of the llama.cpp functions they call: they call them
directly, with no ctypes hop per call. `LIBRARY` is None where the install could not build
the library (no C compiler, no Python headers): Python does the same work then, slower."""

from __future__ import annotations

import ctypes
import importlib.util
import logging

import llama_cpp.llama_cpp as bindings

log = logging.getLogger(__name__)


def _find() -> str | None:
    spec = importlib.util.find_spec(f"{__package__}._hot_loops")
    if spec is None or not spec.origin:
        log.debug("the host's C loops are not built here: Python does their work")
        return None
    return spec.origin


LIBRARY = _find()
_LLAMA = ctypes.CDLL(None, handle=bindings._lib._handle)


def llama_function(name: str) -> int:
    """The address of one of llama.cpp's functions."""
    address = ctypes.cast(getattr(_LLAMA, name), ctypes.c_void_p).value
    if not address:
        raise RuntimeError(f"llama.cpp has no {name}")
    return address
