"""Turning sampled token bytes into text that is safe to publish.

Utf8Stream never emits half a character: a code point split across tokens is held until
it is whole. StopMatcher never emits a stop string, not even its first part: text that could
still become a stop string is held back until it cannot.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable


class Utf8Stream:
    """Incremental UTF-8 decoding of token pieces."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return str(self._decoder.decode(piece))

    def flush(self) -> str:
        return str(self._decoder.decode(b"", final=True))


class StopMatcher:
    """Holds back any tail of the text that is a prefix of a stop string."""

    __slots__ = ("_held", "_longest", "_stops")

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._longest = max((len(s) for s in self._stops), default=0)
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Add text; return (safe text to emit, whether a stop string was hit)."""
        if not self._stops:
            return text, False
        buffer = self._held + text
        hit = min((i for i in (buffer.find(s) for s in self._stops) if i >= 0), default=-1)
        if hit >= 0:
            self._held = ""
            return buffer[:hit], True
        keep = self._partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """The generation ended without a stop string: release what was held."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of buffer that starts some stop string."""
        for size in range(min(len(buffer), self._longest - 1), 0, -1):
            tail = buffer[-size:]
            if any(stop.startswith(tail) for stop in self._stops):
                return size
        return 0
