"""A streamed reply grows a frame at a time and loses nothing, however the writes interleave."""

from __future__ import annotations

import asyncio

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Markdown
from textual.widgets._markdown import MarkdownParagraph

from infertui.core.client import ChatStats
from infertui.tui.widgets import message
from infertui.tui.widgets.message import FRAME_S, AssistantMessage, PacedStream


class SlowMarkdown:
    """Records what is appended; each append takes a while, as a real layout does."""

    def __init__(self) -> None:
        self.appends: list[str] = []

    async def append(self, text: str) -> None:
        self.appends.append(text)
        await asyncio.sleep(0.005)


async def test_the_first_piece_shows_at_once_and_later_ones_a_frame_at_a_time() -> None:
    body = SlowMarkdown()
    stream = PacedStream(body)  # type: ignore[arg-type]
    pieces = [f"token{i} " for i in range(40)]
    stream.write(pieces[0])
    await asyncio.sleep(0.001)
    assert body.appends == [pieces[0]]  # no frame's wait before the first token
    loop = asyncio.get_running_loop()
    began = loop.time()
    for piece in pieces[1:]:
        stream.write(piece)
        await asyncio.sleep(0.002)  # 40 tokens in about 80 ms: about two frames
    took = loop.time() - began  # longer on a loaded box: more frames, each one append
    await stream.close()
    assert "".join(body.appends) == "".join(pieces)
    assert len(body.appends) <= 2 + took / FRAME_S + 1


async def test_close_shows_text_written_while_an_append_runs() -> None:
    body = SlowMarkdown()
    stream = PacedStream(body)  # type: ignore[arg-type]
    stream.write("a")
    await asyncio.sleep(0)  # the first append is now running
    stream.write("b")
    stream.write("c")
    await stream.close()
    await stream.close()  # twice is harmless
    assert "".join(body.appends) == "abc"


async def test_close_does_not_wait_out_a_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(message, "FRAME_S", 2.0)  # a frame far longer than any stall of a box
    body = SlowMarkdown()
    stream = PacedStream(body)  # type: ignore[arg-type]
    stream.write("a")
    await asyncio.sleep(0.01)  # appended; now waiting for the next frame
    stream.write("b")
    started = asyncio.get_running_loop().time()
    await stream.close()
    assert asyncio.get_running_loop().time() - started < 1.0
    assert body.appends == ["a", "b"]


async def test_a_real_markdown_gets_the_whole_reply() -> None:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield Markdown()

    reply = ["# Title\n\n", "1. one\n", "2. two\n\n", "```py\nx = 1\n", "```\n"]
    async with One().run_test() as pilot:
        body = pilot.app.query_one(Markdown)
        stream = PacedStream(body)
        for piece in reply:
            stream.write(piece)
            await asyncio.sleep(0)
        await stream.close()
        assert body.source == "".join(reply)


@pytest.mark.parametrize(
    ("host_stopped", "said"),
    [
        (None, "aborted · gemma · 7 tokens"),  # Esc: the user's own
        ("", "stopped by the host · gemma · 7 tokens"),  # over P2P: no words
        ("the engine was removed", "stopped by the host: the engine was removed · gemma · 7"),
    ],
)
async def test_a_reply_the_host_cut_short_is_not_shown_as_the_users_abort(
    host_stopped: str | None, said: str
) -> None:
    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessage("gemma")

    stats = ChatStats("abort", 5, 7, None, 0.0, "gemma", host_stopped=host_stopped)
    async with One().run_test() as pilot:
        view = pilot.app.query_one(AssistantMessage)
        view.finished(stats)
        assert str(view.stats_line.render()).startswith(said)
        assert view.has_class("aborted")


async def test_a_reply_keeps_the_line_breaks_the_model_wrote() -> None:
    """Markdown joins a paragraph's lines; a chat shows a reply's lines as written (a poem,
    a list without markers, code without a fence), as chat apps do."""

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield AssistantMessage("gemma")

    async with One().run_test() as pilot:
        view = pilot.app.query_one(AssistantMessage)
        stream = view.stream()
        stream.write("Roses are red,\nviolets are blue.\n\nA second paragraph.")
        await stream.close()
        await pilot.pause()
        [first, second] = view.body.query(MarkdownParagraph)
        assert first._content.plain == "Roses are red,\nviolets are blue."
        assert second._content.plain == "A second paragraph."
