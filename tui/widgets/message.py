"""One turn of the chat transcript: the user's words, or the host's streamed reply."""

from __future__ import annotations

import asyncio
import contextlib

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static

from infertui.core.client import ChatStats

FRAME_S = 1 / 20  # a reply's Markdown grows at most this often: smooth to read, cheap to lay out


def reply_markdown() -> MarkdownIt:
    """Textual's GFM-like parser, with a line break kept where the model wrote one, as chat
    apps show replies: models write lists, verse and unfenced code line by line, and plain
    Markdown would join each paragraph's lines into one (Textual shows a soft break as a
    space, whatever markdown-it's own `breaks` option says)."""
    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("keep_line_breaks", _keep_line_breaks)
    return parser


def _keep_line_breaks(state: StateCore) -> None:
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"


class PacedStream:
    """Appends streamed text to a Markdown at most once a frame.

    Textual's MarkdownStream coalesces only while it is behind, so a host that outpaces
    nobody still costs a full layout and render per token; here the first piece shows at
    once and later ones wait for the next frame, a few tokens at a time.
    """

    def __init__(self, body: Markdown) -> None:
        self.body = body
        self.pending: list[str] = []
        self.wake = asyncio.Event()
        self.closing = asyncio.Event()
        self.task = asyncio.create_task(self.run())

    def write(self, text: str) -> None:
        self.pending.append(text)
        self.wake.set()

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await self.flush()
            if self.closing.is_set():
                await self.flush()  # what came while the last append ran
                return
            with contextlib.suppress(TimeoutError):  # a frame, cut short by close()
                await asyncio.wait_for(self.closing.wait(), FRAME_S)

    async def flush(self) -> None:
        if self.pending:
            text = "".join(self.pending)
            self.pending.clear()
            await self.body.append(text)

    async def close(self) -> None:
        """Show what is still pending at once, then stop. Safe to call twice."""
        self.closing.set()
        self.wake.set()
        await asyncio.shield(self.task)


class UserMessage(Static):
    DEFAULT_CSS = """
    UserMessage { margin: 1 0 0 8; padding: 0 1; background: $boost; border-left: thick $accent; }
    UserMessage.editing { border-left: thick $warning; text-style: italic; }
    """

    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)
        self.text = text
        self.in_history = True  # False once its reply failed and the history let it go


class AssistantMessage(Vertical):
    """A reply: Markdown that grows as chunks arrive, then a line of stats (or why it ended)."""

    DEFAULT_CSS = """
    AssistantMessage { height: auto; margin: 1 8 0 0; border-left: thick $success; }
    AssistantMessage Markdown { margin: 0; padding: 0 1; }
    AssistantMessage .stats { color: $text-muted; padding: 0 1; }
    AssistantMessage.aborted { border-left: thick $warning; }
    AssistantMessage.failed { border-left: thick $error; }
    AssistantMessage.failed .stats { color: $error; }
    """

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model
        self.stats: ChatStats | None = None
        self.body = Markdown(parser_factory=reply_markdown)
        self.stats_line = Static("waiting for the host…", classes="stats", markup=False)

    def compose(self) -> ComposeResult:
        yield self.body
        yield self.stats_line

    def stream(self) -> PacedStream:
        return PacedStream(self.body)

    def note(self, text: str) -> None:
        self.stats_line.update(text)

    def finished(self, stats: ChatStats | None) -> None:
        self.stats = stats
        if stats is None:
            self.note("")
            return
        self.model = stats.model or self.model  # the engine that answered, where known
        figures = f"{self.model} · {stats.tokens_out} tokens"
        if stats.host:
            figures = f"{stats.host} · {figures}"
        if stats.tokens_per_s > 0:
            figures += f" · {stats.tokens_per_s:.1f} tok/s"
        if stats.ttft_ms is not None:
            figures += f" · first token {stats.ttft_ms:.0f} ms"
        if stats.host_stopped is not None:  # not the user: say so, with the host's words
            self.add_class("aborted")
            why = f": {stats.host_stopped}" if stats.host_stopped else ""
            self.note(f"stopped by the host{why} · {figures}")
        elif stats.finish_reason == "abort":
            self.add_class("aborted")
            self.note(f"aborted · {figures}")
        elif stats.finish_reason == "length":
            self.note(f"{figures} · stopped at the token limit")
        else:
            self.note(figures)

    def failed(self, message: str) -> None:
        self.add_class("failed")
        self.note(message)
