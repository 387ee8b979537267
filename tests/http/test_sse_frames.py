"""SSE framing of the lean streaming response (core/transport/http/streams.py): what a client's
SSE parser reads back is what was sent, named events included, whatever the data holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from infertui.core.transport.http.streams import SseEvent, sse_frame


def parse(raw: bytes) -> list[tuple[str | None, str]]:
    """A minimal SSE reader after the WHATWG rules: `data:` lines join with a newline, a blank
    line ends an event."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    data: list[str] = []
    for line in raw.decode().split("\n"):
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line.startswith("event: "):
            name = line[7:]
    return events


def test_a_json_chunk_is_one_data_line() -> None:
    assert sse_frame('{"a": 1}') == b'data: {"a": 1}\n\n'


def test_a_named_event_carries_its_name() -> None:
    assert sse_frame(SseEvent('{"x": 2}', "token")) == b'event: token\ndata: {"x": 2}\n\n'


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"])), st.booleans())
def test_any_data_reads_back_as_sent(text: str, named: bool) -> None:
    """Line breaks of any kind become several `data:` lines (a reader joins them with `\\n`)."""
    item = SseEvent(text, "end") if named else text
    expected = text.replace("\r\n", "\n").replace("\r", "\n")
    assert parse(sse_frame(item)) == [("end" if named else None, expected)]
