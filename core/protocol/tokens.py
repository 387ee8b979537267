"""llama-server's `/tokenize` and `/detokenize`: text and tokens both ways, as the model sees
them (to count a prompt's tokens before sending it, say). `model` picks the engine, as in
every other request; without it, the default one answers."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .common import refused

MAX_TOKENS = 262_144  # tokens in one /detokenize


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str
    add_special: bool = Field(False, description="add the model's BOS where it has one")
    with_pieces: Annotated[bool, refused("with_pieces is not supported")] = False
    model: str | None = None


class TokenizeResponse(BaseModel):
    tokens: list[int]


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tokens: Annotated[list[int], Field(max_length=MAX_TOKENS)]
    model: str | None = None


class DetokenizeResponse(BaseModel):
    content: str
