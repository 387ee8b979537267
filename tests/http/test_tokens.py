"""llama-server's /tokenize and /detokenize against the real server (bundled model): what
clients count a prompt's tokens with before they send it."""

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
    assert with_bos[1:] == tokens  # Gemma's BOS first
    completion = await host.client.post(
        "/v1/completions", json={"model": MODEL, "prompt": TEXT, "max_tokens": 1}
    )
    assert completion.json()["usage"]["prompt_tokens"] == len(with_bos)  # the same count
    back = await host.client.post("/detokenize", json={"tokens": tokens, "model": MODEL})
    assert back.status_code == 200 and back.json() == {"content": TEXT}
    turn = await host.client.post("/tokenize", json={"content": "<start_of_turn>user"})
    assert len(turn.json()["tokens"]) == 2  # a control token written out is read as one


async def test_bad_tokens_an_unknown_model_and_pieces_are_refused_by_name(host: Host) -> None:
    outside = await host.client.post("/detokenize", json={"tokens": [5, 10**9]})
    assert outside.status_code == 400 and outside.json()["error"]["param"] == "tokens"
    assert "1000000000" in outside.json()["error"]["message"]
    unknown = await host.client.post("/tokenize", json={"content": "x", "model": "nope"})
    assert unknown.status_code == 404
    pieces = await host.client.post("/tokenize", json={"content": "x", "with_pieces": True})
    assert pieces.status_code == 400 and pieces.json()["error"]["param"] == "with_pieces"
