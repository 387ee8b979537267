"""Issue 35 §3: the sampling fields are declared once (protocol/sampling.py). Each dialect's
request names a field with the declared type, so its bounds are the engine's; where a dialect
takes a field in another shape or range, this test names it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from infertui.core.protocol.chat_api import OllamaChatRequest
from infertui.core.protocol.ollama_api import Options
from infertui.core.protocol.openai import ChatCompletionRequest, CompletionRequest
from infertui.core.protocol.orchestrator import TaskRequest
from infertui.core.protocol.p2p import ChatStart
from infertui.core.protocol.responses import ResponsesRequest
from infertui.core.protocol.sampling import SamplingParams

DIALECTS = [
    OllamaChatRequest, Options, ChatCompletionRequest, CompletionRequest, TaskRequest,
    ChatStart, ResponsesRequest,
]  # fmt: skip
# The shapes the dialects' wires have: OpenAI's {"token id": bias}, its logprobs (a switch
# for chat, at most 5 alternatives for completions), one stop string or a list of them
OTHER_SHAPES = {"logit_bias", "logprobs", "stop"}


def bounds(model: type[BaseModel], field: str) -> Any:
    """A field's JSON Schema without what a dialect may set its own way: its default, its
    description, and whether null means unset."""
    schema = model.model_json_schema()["properties"][field]
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    return [{k: v for k, v in b.items() if k not in ("default", "description", "title")}
            for b in branches]  # fmt: skip


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda m: m.__name__)
def test_every_dialect_takes_a_sampling_field_within_the_declared_bounds(
    dialect: type[BaseModel],
) -> None:
    shared = set(dialect.model_fields) & set(SamplingParams.model_fields) - OTHER_SHAPES
    assert shared
    for field in shared:
        assert bounds(dialect, field) == bounds(SamplingParams, field), field
