"""Why a reply ended: the host's four reasons, and the one table of how the OpenAI and Ollama
dialects say them, read by the faces that send replies and the sides that read them (the
upstream engine, the HTTP client) alike.

Spec 000's `chat_end` and the task stream's `end` (spec 002) send the host's own reasons.
"""

from __future__ import annotations

from typing import Literal

FinishReason = Literal["stop", "length", "abort", "error"]
SaidFinish = Literal["stop", "length"]
OpenAIFinish = Literal["stop", "length", "tool_calls"]

# OpenAI's and Ollama's replies name two reasons: an aborted or failed reply reaches their
# clients as an error (Finished.failure), so the reason it would carry is "stop".
SAID: dict[FinishReason, SaidFinish] = {
    "stop": "stop",
    "length": "length",
    "abort": "stop",
    "error": "stop",
}


def said_finish(reason: FinishReason) -> SaidFinish:
    """The host's reason as OpenAI's and Ollama's replies name it (Ollama's `done_reason`)."""
    return SAID[reason]


def openai_finish(reason: FinishReason, *, called: bool = False) -> OpenAIFinish:
    """The host's reason as an OpenAI reply names it: "tool_calls" for one that ended by
    itself as calls (`called`); a reply cut short stays "length", calls or not."""
    return "tool_calls" if called and reason == "stop" else SAID[reason]


def heard_finish(said: object) -> FinishReason:
    """The reason an OpenAI-compatible server gave (the upstream engine's, the HTTP client's
    host's), as the host's own: "length" is a reply cut short; any other ("stop",
    "tool_calls", "content_filter") is one that ended by itself."""
    return "length" if said == "length" else "stop"
