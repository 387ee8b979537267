"""Where infertui keeps its files (XDG directories); nothing is created on import."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "infertui"


def config_dir() -> Path:
    return Path(os.environ.get("INFERTUI_CONFIG_DIR") or platformdirs.user_config_dir(APP))


def config_file() -> Path:
    return Path(os.environ.get("INFERTUI_CONFIG") or config_dir() / "config.toml")


def data_dir() -> Path:
    """Persistent state such as the host's key seed."""
    return Path(os.environ.get("INFERTUI_DATA_DIR") or platformdirs.user_data_dir(APP))


def state_dir() -> Path:
    """Logs of the TUI (the screen belongs to the app, so logs go here)."""
    return Path(os.environ.get("INFERTUI_STATE_DIR") or platformdirs.user_state_dir(APP))


def cache_dir() -> Path:
    return Path(os.environ.get("INFERTUI_CACHE_DIR") or platformdirs.user_cache_dir(APP))


def list_entries(path: Path, what: str) -> list[tuple[int, str]]:
    """The entries of a list file (an allow list, named keys): (line number, text) of each
    line left once `#` comments and blanks are cut; an unreadable file is an error naming
    `what` it was."""
    from .protocol.errors import ErrorKind, InferError

    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InferError(
            ErrorKind.INVALID_PARAMS, f"cannot read the {what} {path}: {exc.strerror}"
        ) from None
    stripped = ((number, raw.split("#", 1)[0].strip()) for number, raw in enumerate(lines, 1))
    return [(number, entry) for number, entry in stripped if entry]
