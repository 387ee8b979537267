"""Request building blocks shared by every face: chat messages, the bounds on what a request
carries, and the sampling (declared in sampling.py, importable from here too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from .sampling import SamplingParams as SamplingParams  # where every floor has found it

Role = Literal["system", "user", "assistant"]
MAX_MESSAGES = 1024  # turns in one conversation
MAX_PATH = 4096  # bytes in a model path (Linux PATH_MAX)
MAX_PROMPTS = 128  # prompts in one completion request


class ChatMessage(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str

    @field_validator("content")
    @classmethod
    def _no_nul(cls, content: str) -> str:
        # llama.cpp's chat templates take C strings: a NUL would silently cut the turn short
        if "\x00" in content:
            raise ValueError("a message may not contain a NUL character (U+0000)")
        return content


# Every list and string a request carries is bounded: what a job keeps must stay small.
Messages = Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
T = TypeVar("T")

NO_SUFFIX = "fill-in-the-middle ('suffix') is not supported"
NO_IMAGES = "images are not supported: the host's engines read text only"


def refused(reason: str) -> AfterValidator:
    """A field the host cannot honour: an empty or false value passes, any other is refused
    with `reason` (a 400 naming the field). Read past, the reply would look like a good one."""

    def check(value: T) -> T:
        if value:
            raise ValueError(reason)
        return value

    return AfterValidator(check)


def without_oldest_turn(history: Sequence[ChatMessage], start: int) -> int | None:
    """Where the conversation sent as `history[start:]` starts once its oldest exchange is
    left out: at its next user turn. None where only the question asked now is left. A chat
    longer than the model's context goes on this way, as Ollama's does, rather than end (the
    chat app, and /api/chat for Ollama's clients)."""
    for at in range(start + 1, len(history)):
        if history[at].role == "user":
            return at
    return None


def parameter_size(count: int) -> str:
    """A model's parameter count as Ollama shows it: "135M", "1.24B"."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)
