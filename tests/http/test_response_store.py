"""The kept responses: a conversation grows along a chain, what each response costs counts its
own JSON too, and the oldest go first when the store is out of room."""

from __future__ import annotations

from infertui.core.protocol.responses import OutputMessage, OutputText, ResponseObject
from infertui.core.transport.http.response_store import ResponseStore


def response(response_id: str, text: str | None, instructions: str | None = None) -> ResponseObject:
    output = [] if text is None else [
        OutputMessage(id=f"msg_{response_id}", content=[OutputText(text=text)])
    ]  # fmt: skip
    return ResponseObject(
        id=response_id, created_at=0, status="completed", model="m", output=output,
        instructions=instructions,
    )  # fmt: skip


def said(user: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": user}


def test_a_chain_s_conversation_is_every_input_then_each_output() -> None:
    store = ResponseStore()
    store.put(response("resp_1", "Hello Ana."), None, [said("I am Ana.")], owner=None)
    first = store.find("resp_1")
    assert first is not None
    assert first.conversation[0] == said("I am Ana.")
    reply = first.conversation[1]
    assert reply["role"] == "assistant" and reply["content"][0]["text"] == "Hello Ana."
    store.put(response("resp_2", None), first, [said("Who am I?")], owner="key0")  # no text
    second = store.find("resp_2")
    assert second is not None and second.owner == "key0"
    roles = [item.get("role") for item in second.conversation]
    assert roles == ["user", "assistant", "user", "assistant"]  # an empty reply is a turn too
    assert second.chain_chars > first.chain_chars
    assert store.find("resp_3") is None


def test_the_response_s_own_json_counts_and_the_oldest_go_first() -> None:
    store = ResponseStore(max_chars=2_000)
    store.put(response("resp_big", "ok", instructions="x" * 3_000), None, [], owner=None)
    assert store.find("resp_big") is None  # its instructions alone are past the room
    for k in range(10):
        store.put(response(f"resp_{k}", "x" * 40), None, [said("y" * 40)], owner=None)
    assert 0 < len(store) < 10
    assert store.find("resp_9") is not None and store.find("resp_0") is None
    assert store.delete("resp_9") and not store.delete("resp_9")
    assert store.find("resp_9") is None
