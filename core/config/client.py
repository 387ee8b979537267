"""`[client]` and `[ui]`: `infertui connect` and `infertui ask`, and how the apps look."""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, Field, field_validator

from ..protocol.sampling import MaxTokens, Temperature, TopP


class ChatSampling(TypedDict, total=False):
    """The chat app's sampling options, as keyword arguments for `Client.chat`; a field left
    out is the model's own (its GGUF's recommendation, else the host's default)."""

    temperature: float
    top_p: float
    max_tokens: int


class ClientSettings(BaseModel):
    """`infertui connect` and `infertui ask`."""

    model: str | None = Field(
        None, description="the host's engine to ask; unset: the host's default"
    )
    system_prompt: str = Field(
        "", description="the system prompt, sent first in every conversation; empty: none"
    )
    # Unset, as in Ollama's clients: the model's own sampling suits it better than any figure
    # written here for every model (a 135M model wanders at a temperature a 7B takes well).
    temperature: Temperature | None = Field(None, description="0 is greedy; unset: the model's own")
    top_p: TopP | None = Field(None, description="unset: the model's own")
    max_tokens: MaxTokens | None = Field(
        None, description="longest reply, in tokens; unset: until the context is full"
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="give up connecting after this")

    @field_validator("temperature", "top_p", "max_tokens", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        """An options field left empty means the model's own value (no limit, for max_tokens)."""
        return None if isinstance(value, str) and not value.strip() else value

    def sampling(self) -> ChatSampling:
        chosen: ChatSampling = {}
        if self.max_tokens is not None:
            chosen["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            chosen["temperature"] = self.temperature
        if self.top_p is not None:
            chosen["top_p"] = self.top_p
        return chosen


class UiSettings(BaseModel):
    """How the apps look; kept by the apps themselves."""

    theme: str | None = Field(None, description="Textual theme (Ctrl+P, then theme)")
