"""Issue 14 §4: embeddings from any loaded engine, made on first use, through the engine's own
queue: the official `openai` and `ollama` clients against the real server (bundled model)."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import ollama
import openai
import pytest

from .conftest import MODEL, Host, HostFactory

pytestmark = pytest.mark.model

TEXTS = ["The cat sat on the mat.", "A kitten rests on a rug.", "Quarterly revenue rose 4%."]


async def test_openai_embeddings_as_floats_and_as_base64(sdk: openai.AsyncOpenAI) -> None:
    floats = await sdk.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2] and floats.model == MODEL
    vectors = np.array([d.embedding for d in floats.data])
    assert vectors.shape == (3, 576)  # the model's width
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # L2-normalised
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]  # cat is nearer kitten than revenue
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 3 * 4
    # the SDK asks for base64; the same inputs, so the same decode: only the encoding differs
    # (an input embedded beside others moves in float rounding: compared here like for like)
    packed = await sdk.embeddings.create(model=MODEL, input=TEXTS)
    assert np.allclose([d.embedding for d in packed.data], vectors, atol=1e-6)
    with pytest.raises(openai.BadRequestError, match="576 dimensions"):
        await sdk.embeddings.create(model=MODEL, input="x", dimensions=64)


async def test_a_first_embedding_warns_of_no_pooling_the_host_chose(
    start_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """SmolLM2's GGUF says no pooling and the host pools by the mean (embedder.py): llama.cpp
    warns of it at each first embedding, which read as a problem in the headless log."""
    host = await start_host()
    with caplog.at_level(logging.DEBUG, logger="infertui.llama_cpp"):
        reply = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": "x"})
    assert reply.status_code == 200
    pooling = [r for r in caplog.records if "pooling_type" in r.getMessage()]
    assert pooling and all(r.levelno == logging.DEBUG for r in pooling), pooling


async def test_ollama_embed(host: Host) -> None:
    client = ollama.AsyncClient(host=host.url)
    try:
        reply = await client.embed(model=MODEL, input=TEXTS[:2])
        assert len(reply.embeddings) == 2 and len(reply.embeddings[0]) == 576
        one = await client.embed(model=f"{MODEL}:latest", input=TEXTS[0])
        # alone, an input's vector is not to the bit the one it gets beside another (float
        # rounding): the first of the two is the one nearest it
        assert int(np.argmax(np.array(reply.embeddings) @ one.embeddings[0])) == 0
        assert reply.prompt_eval_count and reply.prompt_eval_count > 8
        older = await client.embeddings(model=MODEL, prompt=TEXTS[0])  # /api/embeddings
        assert np.allclose(older.embedding, one.embeddings[0], atol=1e-6)  # alone, as it was
        empty = await host.client.post("/api/embeddings", json={"model": MODEL, "prompt": ""})
        assert empty.status_code == 400 and set(empty.json()) == {"error"}  # Ollama's shape
    finally:
        await client._client.aclose()


async def test_embedding_jobs_share_the_queue_and_its_refusals(
    start_host: HostFactory,
) -> None:
    """The same admission as generation: with the one slot busy and the queue of two full,
    an input is refused with QUEUE_FULL and a retry hint, and nothing is kept. With room, a
    batch far larger than the queue is embedded a wave at a time (it was refused as more
    than the engine can hold), while the stream beside it goes on."""
    host = await start_host(parallel=1, queue=2)
    story = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 120, "temperature": 0,
             "ignore_eos": True}  # fmt: skip
    generating = asyncio.create_task(host.client.post("/v1/completions", json=story))
    while host.service.metrics()[0].slots_busy == 0:
        await asyncio.sleep(0.01)
    short = {**story, "max_tokens": 2}
    waiting = [asyncio.create_task(host.client.post("/v1/completions", json=short)) for _ in "ab"]
    while host.service.queues()[0].depth < 2:
        await asyncio.sleep(0.01)
    refused = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": TEXTS})
    assert refused.status_code == 429 and refused.headers["retry-after"], refused.text
    assert host.service.queues()[0].depth == 2  # none of its inputs kept
    for task in waiting:
        assert (await task).status_code == 200
    many = [f"{TEXTS[i % 3]} ({i})" for i in range(40)]
    batch = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": many})
    assert batch.status_code == 200, batch.text
    data = batch.json()["data"]
    assert [d["index"] for d in data] == list(range(40))
    one = await host.client.post("/v1/embeddings", json={"model": MODEL, "input": many[7]})
    # Alone, its vector is not the one it got in a wave of 16 to the bit (measured: 2.4e-3 at
    # most in a component, a cosine of 0.99992): it is the batch's vector nearest it, nearer
    # than those of the same sentence with other numbers (0.9991 at most)
    alone = np.array(one.json()["data"][0]["embedding"])
    nearness = np.array([d["embedding"] for d in data]) @ alone
    assert int(np.argmax(nearness)) == 7 and nearness[7] > 0.999, nearness
    done = await generating
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 120


async def test_the_pooling_flag_decides_how_token_vectors_pool(start_host: HostFactory) -> None:
    """--pooling: the GGUF gives none for a decoder model, so mean is the default; last (the
    final token's vector) is another vector of the same width."""
    default = await start_host()
    last = await start_host(pooling="last")
    body = {"model": MODEL, "input": TEXTS[0]}
    mean_vector = np.array(
        (await default.client.post("/v1/embeddings", json=body)).json()["data"][0]["embedding"]
    )
    last_vector = np.array(
        (await last.client.post("/v1/embeddings", json=body)).json()["data"][0]["embedding"]
    )
    assert mean_vector.shape == last_vector.shape == (576,)
    assert float(mean_vector @ last_vector) < 0.99  # pooled another way
