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
