"""Issue 14 §1 and §3: structured output and the rest of the OpenAI request, with the official
openai SDK against the real server on the bundled model. A weak base model cannot be trusted
to write JSON; the grammar makes it, so these run for real."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from .conftest import MODEL, Host

pytestmark = pytest.mark.model

ASK = [{"role": "user", "content": "Describe a cat as JSON."}]
PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "colour": {"enum": ["black", "white", "ginger", "grey"]},
        "age": {"type": "integer"},
        "indoor": {"type": "boolean"},
        "toys": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "colour", "age", "indoor", "toys"],
    "additionalProperties": False,
}
AS_PET = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}


@pytest.mark.parametrize("temperature", [0.0, 0.9])
async def test_a_json_schema_reply_always_validates(
    sdk: openai.AsyncOpenAI, temperature: float
) -> None:
    for seed in (1, 2):
        reply = await sdk.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=160, temperature=temperature, seed=seed,
            response_format=AS_PET,  # type: ignore[arg-type]
        )  # fmt: skip
        assert reply.choices[0].finish_reason == "stop", reply  # the grammar ended it
        jsonschema.validate(json.loads(reply.choices[0].message.content or ""), PET)


@pytest.mark.deterministic
async def test_a_streamed_json_schema_reply_is_the_same_json(sdk: openai.AsyncOpenAI) -> None:
    """The host is deterministic: the stream reads its prompt as the whole reply did, not from
    the cells that reply left, so the two are one generation."""
    whole = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=160, temperature=0,
        response_format=AS_PET,  # type: ignore[arg-type]
    )  # fmt: skip
    stream = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=160, temperature=0, stream=True,
        response_format=AS_PET,  # type: ignore[arg-type]
    )  # fmt: skip
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == whole.choices[0].message.content
    jsonschema.validate(json.loads(text), PET)


async def test_json_mode_replies_with_one_json_object(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=200, temperature=0,
        response_format={"type": "json_object"},
    )  # fmt: skip
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    else:  # free-form JSON may run to the budget; what came is still JSON so far
        assert (reply.choices[0].message.content or "").startswith("{")


async def test_json_mode_with_a_schema_follows_it(sdk: openai.AsyncOpenAI) -> None:
    """`{"type": "json_object", "schema": ...}`, as llama-server and llama-cpp-python take
    it: the schema was read past, and the reply was any JSON object."""
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=160, temperature=0,
        response_format={"type": "json_object", "schema": PET},  # type: ignore[typeddict-unknown-key]
    )  # fmt: skip
    assert reply.choices[0].finish_reason == "stop", reply
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), PET)


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "integer", "minimum": 0}, "'minimum' at $"),
        ({"type": "object", "properties": {"ids": {"uniqueItems": True}}}, "$.properties.ids"),
        ({"type": "strng"}, "unknown type 'strng'"),
        ({"$ref": "https://example.com/schema.json"}, "only local references"),
        ({"type": "string", "pattern": "^(?=a)b$"}, "cannot be turned into a grammar"),
    ],
)
async def test_a_schema_the_grammar_cannot_enforce_is_refused_by_name(
    sdk: openai.AsyncOpenAI, schema: dict[str, object], named: str
) -> None:
    form = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=8,
            response_format=form,  # type: ignore[arg-type]
        )  # fmt: skip
    assert caught.value.status_code == 400
    message = str(caught.value)
    assert named in message and "response_format" in message, message
    ok = await sdk.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
    assert ok.choices[0].message.content is not None  # the host serves on


@pytest.mark.deterministic
async def test_content_parts_are_joined_and_images_refused_by_name(
    sdk: openai.AsyncOpenAI,
) -> None:
    """Text parts make the prompt their joined text makes: at temperature 0 the reply is the
    plain text's. (Deterministic host: the second prompt is read afresh, not on the first's
    kept cells, so equal prompts take one path.)"""
    plain = await sdk.chat.completions.create(
        model=MODEL, max_tokens=12, temperature=0,
        messages=[{"role": "user", "content": "Name three colours.\nBe brief."}],
    )  # fmt: skip
    parts = await sdk.chat.completions.create(
        model=MODEL, max_tokens=12, temperature=0,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "Name three colours."}, {"type": "text", "text": "Be brief."},
        ]}],
    )  # fmt: skip
    assert parts.choices[0].message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=MODEL, max_tokens=4,
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]}],
        )  # fmt: skip
    assert "'image_url' content is not supported" in str(caught.value)


async def test_max_completion_tokens_user_and_metadata(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0, max_completion_tokens=3, user="ana",
        metadata={"team": "infra"},
    )  # fmt: skip
    assert reply.usage is not None and reply.usage.completion_tokens == 3
    assert reply.choices[0].finish_reason == "length"


async def test_streamed_completions_end_with_usage_when_asked(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.completions.create(
        model=MODEL, prompt=["Once upon a time", "The sea"], max_tokens=5, temperature=0,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = [chunk async for chunk in stream]
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert usage.completion_tokens == 10 and usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.deterministic
async def test_n_choices_whole_and_streamed(sdk: openai.AsyncOpenAI) -> None:
    """`n` choices, each its own seed; greedy ones agree. The host is deterministic: each
    choice reads the prompt alone at the same chunks (by default the others copy the first's
    cells and read only the last token, and a greedy near tie may part them)."""
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=12, temperature=1.0, seed=11, n=3,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert all(texts) and len(set(texts)) > 1, texts  # a seed each: the choices differ
    assert reply.usage is not None and reply.usage.completion_tokens == 36
    # the prompt counts once, as OpenAI counts it (by default the other choices copy its cells)
    one = await sdk.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
    assert one.usage is not None and reply.usage.prompt_tokens == one.usage.prompt_tokens
    details = reply.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens <= reply.usage.prompt_tokens
    stream = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=6, temperature=0, n=2, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = [c async for c in stream]
    by_choice: dict[int, str] = {0: "", 1: ""}
    for c in chunks:
        for choice in c.choices:
            by_choice[choice.index] += choice.delta.content or ""
    assert by_choice[0] and by_choice[0] == by_choice[1]  # greedy: the same words twice
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == one.usage.prompt_tokens


@pytest.mark.deterministic
async def test_completions_give_n_choices_for_each_prompt(sdk: openai.AsyncOpenAI) -> None:
    """Choice i * n + j is choice j of prompt i, as OpenAI numbers them; greedy choices of
    one prompt agree, and each prompt counts once. The host is deterministic, so that the
    choices of a prompt take one path (each reads it alone, at the same chunks)."""
    reply = await sdk.completions.create(
        model=MODEL, prompt=["Once upon a time", "The sea is"], n=2, max_tokens=5, temperature=0
    )
    texts = [c.text for c in sorted(reply.choices, key=lambda c: c.index)]
    assert len(texts) == 4 and texts[0] == texts[1] and texts[2] == texts[3]
    assert texts[0] != texts[2]
    once = await sdk.completions.create(
        model=MODEL, prompt=["Once upon a time", "The sea is"], max_tokens=1
    )
    assert reply.usage is not None and once.usage is not None
    assert reply.usage.prompt_tokens == once.usage.prompt_tokens  # each prompt counts once
    assert reply.usage.completion_tokens == 4 * 5


@pytest.mark.deterministic
async def test_chat_logprobs_whole_and_streamed(sdk: openai.AsyncOpenAI) -> None:
    """Issue 14 §3: each token's log-probability under the model, with the likeliest ones;
    greedy picks the likeliest, so it heads its own list. Streamed, the same tokens: the host
    is deterministic, so the stream reads its prompt afresh as the whole reply did."""
    reply = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
    )
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 8
    assert (
        b"".join(bytes(t.bytes or []) for t in content).decode() == reply.choices[0].message.content
    )
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
    plain = await sdk.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2)
    assert plain.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError, match="logprobs: true"):  # as OpenAI refuses it
        await sdk.chat.completions.create(model=MODEL, messages=ASK, top_logprobs=3)
    stream = await sdk.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=8, temperature=0, logprobs=True, stream=True
    )
    streamed = [t async for c in stream if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content or []]  # fmt: skip
    assert [t.token for t in streamed] == [t.token for t in content]


async def test_completion_logprobs(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and len(logprobs.tokens) == 5
    assert "".join(logprobs.tokens) == reply.choices[0].text
    assert all(lp <= 0 for lp in logprobs.token_logprobs or [])
    assert logprobs.text_offset == sorted(logprobs.text_offset or [])
    assert all(1 <= len(top) <= 2 for top in logprobs.top_logprobs or [])


async def test_a_gbnf_grammar_decides_the_reply_as_llama_servers_does(host: Host) -> None:
    """`grammar` (llama-server's and llama-cpp-python's field) was read past: the reply was
    free text. Sampled, on both endpoints, it can only be one of the grammar's words; a
    grammar llama.cpp cannot parse is a 400 naming it; with a JSON response_format, too."""
    grammar = 'root ::= ("yes" | "no" | "maybe") "."'
    for seed in (1, 2, 3):
        chat = await host.client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": ASK, "max_tokens": 8, "temperature": 1.0, "seed": seed,
            "grammar": grammar,
        })  # fmt: skip
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] in ("yes.", "no.", "maybe.")
    text = await host.client.post("/v1/completions", json={
        "model": MODEL, "prompt": "Is the sky blue?", "max_tokens": 8, "grammar": grammar,
    })  # fmt: skip
    assert text.json()["choices"][0]["text"] in ("yes.", "no.", "maybe."), text.text
    broken = await host.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": ASK, "max_tokens": 8, "grammar": "root ::= (",
    })  # fmt: skip
    assert broken.status_code == 400 and broken.json()["error"]["param"] == "grammar"
    both = await host.client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": ASK, "grammar": grammar,
        "response_format": {"type": "json_object"},
    })  # fmt: skip
    assert both.status_code == 400 and "not both" in both.json()["error"]["message"]
