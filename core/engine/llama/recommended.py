"""The sampling a model is best asked with, where a request leaves a field unset.

Two sources, the later winning: the GGUF's own `general.sampling.*` keys (written by its
converter from the model's generation config, and read by llama.cpp's tools in the same
way), then the engine's spec (the bundled model's card, as an Ollama Modelfile's PARAMETER
lines). With neither, SamplingParams' defaults apply: llama.cpp's own, as llama-server's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ...protocol.common import SamplingParams

log = logging.getLogger(__name__)

# GGUF key (after `general.sampling.`) -> SamplingParams field, and how to read its text
GGUF_KEYS: dict[str, tuple[str, Callable[[str], float]]] = {
    "temp": ("temperature", float),
    "top_k": ("top_k", int),
    "top_p": ("top_p", float),
    "min_p": ("min_p", float),
    "penalty_repeat": ("repeat_penalty", float),
    "penalty_last_n": ("repeat_last_n", int),
    "mirostat": ("mirostat", int),
    "mirostat_tau": ("mirostat_tau", float),
    "mirostat_eta": ("mirostat_eta", float),
}


def from_gguf(meta: Callable[[str], str | None]) -> dict[str, float]:
    """The sampling keys a GGUF carries; one that does not read as a number is passed over."""
    found: dict[str, float] = {}
    for key, (field, read) in GGUF_KEYS.items():
        text = meta(f"general.sampling.{key}")
        if text is None:
            continue
        try:
            found[field] = read(text)
        except ValueError:
            continue
    return found


def recommended(meta: Callable[[str], str | None], chosen: Mapping[str, float]) -> dict[str, float]:
    """The GGUF's recommendation with the spec's own choices over it, each checked against
    SamplingParams' ranges here, once, so that jobs take them without validating again. A
    GGUF's key out of range is passed over (and logged); a spec's is the caller's mistake."""
    found = {}
    for field, value in from_gguf(meta).items():
        try:
            found.update(SamplingParams.valid_defaults({field: value}))
        except ValueError as err:
            log.warning("the GGUF's general.sampling %s=%s is passed over: %s", field, value, err)
    return {**found, **SamplingParams.valid_defaults(chosen)}
