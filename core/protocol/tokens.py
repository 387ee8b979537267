"""llama-server's own endpoints: `/tokenize` and `/detokenize`, text and tokens both ways, as
the model sees them (to count a prompt's tokens before sending it, say), and `/props`, what a
client of llama-server reads to learn the context and the slots. `model` picks the engine, as
in every other request; without it, the default one answers."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .common import SamplingParams, refused

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


class GenerationSettings(BaseModel):
    n_ctx: int = Field(description="tokens of context per slot; 0 where not known (an upstream)")
    params: dict[str, float | int] = Field(
        description="the host's sampling defaults (Ollama's and the P2P faces'; OpenAI's "
        "routes take OpenAI's: temperature 1, top_p 1)"
    )


class Modalities(BaseModel):
    vision: bool = False
    audio: bool = False


class Props(BaseModel):
    """The part of llama-server's `/props` that describes the server, with its field names."""

    default_generation_settings: GenerationSettings
    total_slots: int
    model_alias: str = Field(description="the engine's id, what a request's `model` names")
    model_path: str
    chat_template: str = Field(description="the Jinja template, where the engine has one")
    modalities: Modalities = Modalities()
    build_info: str
    is_sleeping: bool = False


def default_sampling(defaults: SamplingParams | None = None) -> dict[str, float | int]:
    """A request's sampling when it sets none (SamplingParams' defaults, or an engine's own),
    under llama-server's names (`n_predict` -1: to the context)."""
    defaults = defaults or SamplingParams()
    names = (
        "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
        "repeat_last_n", "presence_penalty", "frequency_penalty", "mirostat", "mirostat_tau",
        "mirostat_eta",
    )  # fmt: skip
    return {"n_predict": -1, **{name: getattr(defaults, name) for name in names}}
