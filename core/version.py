"""infertui's own version, from the installed package's metadata. A tree run from source
without being installed (the GPU kit puts it on PYTHONPATH) has none: it says so rather than
failing at start-up."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def infertui_version() -> str:
    try:
        return version("infertui")
    except PackageNotFoundError:
        return "0+unknown (not installed)"
