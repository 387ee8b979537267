"""`keep_alive`, as Ollama reads it: how long a model stays loaded after a request.

A number is seconds and a string is a Go duration ("5m", "1h30m", "90s"), as Ollama's clients
send them; a negative one means forever and 0 unloads the model once it is idle. A bare number
in a string ("-1", "300") is read as seconds too, which Ollama's parser refuses but its users
type.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

FOREVER = math.inf
LONGEST_S = 100 * 365 * 86400.0  # beyond this, as good as forever (and no date overflows)

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
          "h": 3600.0}  # fmt: skip
_PIECE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def seconds_of(value: str | float | None) -> float | None:
    """Seconds a model stays after a request (FOREVER for a negative value); None for no
    value (the host's default then applies). ValueError for words that are no duration."""
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise ValueError("keep_alive is a duration such as 5m, or seconds, not true/false")
        return None
    if isinstance(value, int | float):
        return _bounded(float(value))
    if not isinstance(value, str):  # (a list, an object: JSON allows anything here)
        raise ValueError("keep_alive is a duration such as 5m, or seconds")
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        return _bounded(number)
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
    pieces = _PIECE.findall(body)
    if not body or "".join(n + u for n, u in pieces) != body:
        raise ValueError(f"keep_alive '{value}' is not a duration such as 5m, 1h30m or 300")
    total = sum(float(number) * _UNITS[unit] for number, unit in pieces)
    return FOREVER if sign < 0 else _bounded(total)


def _bounded(seconds: float) -> float:
    if math.isnan(seconds):
        raise ValueError("keep_alive is a duration such as 5m, or seconds, not NaN")
    return FOREVER if seconds < 0 or seconds > LONGEST_S else seconds


KeepAlive = Annotated[float | None, BeforeValidator(seconds_of)]


def said(seconds: float) -> str:
    """A keep-alive as a person reads it: "forever", "0 s", "5 min", "1 h 30 min"."""
    if seconds == FOREVER:
        return "forever"
    if seconds < 60:
        return f"{seconds:g} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return " ".join([f"{hours} h"] * bool(hours) + [f"{minutes} min"] * bool(minutes))
