"""Short llama.cpp calls, bound twice: holding the GIL, and letting go of it.

llama_cpp binds the library through `ctypes.CDLL`, whose every call lets go of the GIL and
takes it back: between two decodes, each is a chance for the event loop's thread to take it,
and the engine thread then waits out the loop's whole turn. Calls of a few microseconds that
the engine thread makes alone (one stream's logits row, its chain over a few dozen
candidates) go through `HOLDING` (`ctypes.PyDLL`), so the loop runs while the model does;
the sampler's threads, which share a step's many rows, use `RELEASING` to run side by side.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp.llama_cpp as bindings


class ShortCalls:
    """The functions, bound on the library llama_cpp loaded (its handle: no second copy)."""

    def __init__(self, library: type[ctypes.CDLL]) -> None:
        self._lib = library(None, handle=bindings._lib._handle)
        self.logits_address = self._bind(
            "llama_get_logits_ith", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32
        )
        self.sampler_apply = self._bind(
            "llama_sampler_apply", None, ctypes.c_void_p, ctypes.c_void_p
        )
        self.sampler_accept = self._bind(
            "llama_sampler_accept", None, ctypes.c_void_p, ctypes.c_int32
        )

    def _bind(self, name: str, restype: Any, *argtypes: Any) -> Any:
        function = self._lib[name]  # (a function object of its own: llama_cpp's keeps its types)
        function.restype = restype
        function.argtypes = list(argtypes)
        return function


HOLDING = ShortCalls(ctypes.PyDLL)
RELEASING = ShortCalls(ctypes.CDLL)


class CandidateArray(ctypes.Structure):
    """llama_token_data_array, its data a plain address (a numpy array's)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("selected", ctypes.c_int64),
        ("sorted", ctypes.c_bool),
    ]
