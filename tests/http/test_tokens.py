"""llama-server's /tokenize, /detokenize and /props against the real server (bundled model):
what clients count a prompt's tokens with before they send it, and learn the context from."""

from __future__ import annotations

import pytest

from .conftest import MODEL, Host

pytestmark = pytest.mark.model

TEXT = "Name three colours."


async def test_tokenize_counts_what_a_completion_reads_and_detokenize_reads_it_back(
    host: Host,
) -> None:
    plain = await host.client.post("/tokenize", json={"content": TEXT})
    assert plain.status_code == 200, plain.text
    tokens = plain.json()["tokens"]
    special = await host.client.post("/tokenize", json={"content": TEXT, "add_special": True})
    with_bos = special.json()["tokens"]
    assert with_bos == tokens  # SmolLM2 reads no BOS: add_special adds nothing
    completion = await host.client.post(
        "/v1/completions", json={"model": MODEL, "prompt": TEXT, "max_tokens": 1}
    )
    assert completion.json()["usage"]["prompt_tokens"] == len(with_bos)  # the same count
    back = await host.client.post("/detokenize", json={"tokens": tokens, "model": MODEL})
    assert back.status_code == 200 and back.json() == {"content": TEXT}
    turn = await host.client.post("/tokenize", json={"content": "<|im_start|>user"})
    assert len(turn.json()["tokens"]) == 2  # a control token written out is read as one


async def test_bad_tokens_an_unknown_model_and_pieces_are_refused_by_name(host: Host) -> None:
    outside = await host.client.post("/detokenize", json={"tokens": [5, 10**9]})
    assert outside.status_code == 400 and outside.json()["error"]["param"] == "tokens"
    assert "1000000000" in outside.json()["error"]["message"]
    unknown = await host.client.post("/tokenize", json={"content": "x", "model": "nope"})
    assert unknown.status_code == 404
    pieces = await host.client.post("/tokenize", json={"content": "x", "with_pieces": True})
    assert pieces.status_code == 400 and pieces.json()["error"]["param"] == "with_pieces"


async def test_props_says_the_context_per_slot_the_slots_and_the_template(host: Host) -> None:
    """llama.cpp's web UI and llama-server's clients read n_ctx and total_slots here."""
    response = await host.client.get("/props")
    assert response.status_code == 200, response.text
    props = response.json()
    card = (await host.client.get(f"/v1/models/{MODEL}")).json()
    assert props["default_generation_settings"]["n_ctx"] == card["max_model_len"] > 0
    assert props["total_slots"] == 2  # the fixture's --parallel
    assert props["model_alias"] == MODEL and props["model_path"].endswith(".gguf")
    assert "<|im_start|>" in props["chat_template"]  # the GGUF's own, ChatML
    defaults = props["default_generation_settings"]["params"]
    # the bundled model's own sampling (its card's), where a request sets none
    assert (defaults["temperature"], defaults["top_p"], defaults["repeat_penalty"]) == (
        0.2,
        0.9,
        1.1,
    )
    assert defaults["n_predict"] == -1
    named = await host.client.get("/props", params={"model": MODEL})
    assert named.json() == props
    unknown = await host.client.get("/props", params={"model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
