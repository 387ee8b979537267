"""The kept responses: a conversation grows along a chain, and the oldest go first when the
store is out of room."""

from __future__ import annotations

import pytest

from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.responses import OutputMessage, OutputText, ResponseObject
from infertui.core.transport.http.response_store import ResponseStore


def response(response_id: str, text: str) -> ResponseObject:
    message = OutputMessage(id=f"msg_{response_id}", content=[OutputText(text=text)])
    return ResponseObject(
        id=response_id, created_at=0, status="completed", model="m", output=[message]
    )


def said(user: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": user}


def test_a_conversation_is_the_inputs_then_the_output_as_an_item() -> None:
    store = ResponseStore()
    store.put(response("resp_1", "Hello Ana."), [said("I am Ana.")], owner=None)
    first = store.get("resp_1").conversation
    assert first[0] == said("I am Ana.")
    assert first[1]["role"] == "assistant" and first[1]["content"][0]["text"] == "Hello Ana."
    store.put(response("resp_2", "Ana."), [*first, said("Who am I?")], owner="key0")
    kept = store.get("resp_2")
    assert [item.get("role") for item in kept.conversation] == [
        "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert kept.owner == "key0" and kept.response.output == response("resp_2", "Ana.").output


def test_the_oldest_go_first_when_out_of_room() -> None:
    store = ResponseStore(max_chars=400)
    for k in range(10):
        store.put(response(f"resp_{k}", "x" * 40), [said("y" * 40)], owner=None)
    assert 0 < len(store) < 10
    store.get("resp_9")  # the newest stays
    with pytest.raises(InferError) as gone:
        store.get("resp_0", "previous_response_id")
    assert gone.value.kind is ErrorKind.NOT_FOUND and gone.value.param == "previous_response_id"
    store.put(response("resp_big", "x" * 500), [], owner=None)  # bigger than the store
    with pytest.raises(InferError):
        store.get("resp_big")
    assert store.delete("resp_9") and not store.delete("resp_9")
