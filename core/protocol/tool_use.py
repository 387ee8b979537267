"""A reply that may call tools: its calls read whole (`ToolUse`), and a stream's way of holding
its text back while it may yet be calls (`HeldReply`, which host/reply.py runs for every
streamed reply). Both read the reply with the one reader of calls (tool_stream.py): a reply
streamed and the same reply whole give the same calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .events import TokenText
from .openai_replies import FunctionCall, ToolCallOut
from .tool_stream import CallDelta, CallStream, may_be_a_call, parse_calls


@dataclass(frozen=True)
class ToolUse:
    """The tools a reply may call (none: plain text), and whether it must."""

    names: set[str]
    forced: bool

    def calls(self, text: str) -> list[ToolCallOut]:
        """The calls of a whole reply: those written whole (tool_stream.whole_calls)."""
        return [
            ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
            for c in (call.with_id() for call in parse_calls(text, self.names, forced=self.forced))
        ]

    def final_calls(self, text: str, cut: bool) -> list[ToolCallOut]:
        """The calls of a whole reply; one that max_tokens cut gives them as far as they got,
        as its stream sends them."""
        return self.streamed(text) if cut else self.calls(text)

    def streamed(self, text: str) -> list[ToolCallOut]:
        """The calls a stream of this text sends, the last one as far as it got (a reply
        `max_tokens` cut in the middle of its calls gives them)."""
        if not self.holds(text):
            return []
        names: list[tuple[str | None, str]] = []  # (id, name) of each call, in order
        arguments: list[str] = []
        for delta in CallStream(self.names).feed(text):
            if delta.name is not None:
                names.append((delta.id, delta.name))
                arguments.append("")
            arguments[delta.index] += delta.arguments or ""
        return [
            ToolCallOut(id=call_id, function=FunctionCall(name=name, arguments=args))
            for (call_id, name), args in zip(names, arguments, strict=True)
        ]

    def holds(self, text: str) -> bool:
        """Whether a stream keeps this reply's text back: it may yet be a call."""
        return bool(self.names) and (self.forced or may_be_a_call(text))


class HeldReply:
    """One streamed reply's pieces of text on their way out: sent as they come where no tool
    is offered; else held while the reply may yet be calls, and then sent as call deltas once
    it is one, or let go, all at once, as text once it cannot be."""

    def __init__(self, use: ToolUse) -> None:
        self._use = use
        self._held: list[TokenText] | None = [] if use.names else None
        self._calls = CallStream(use.names)

    def add(self, piece: TokenText) -> tuple[Sequence[CallDelta], list[TokenText]]:
        """What to send now: call deltas, or pieces of text (this one, or all held so far)."""
        if self._held is None:  # every token of a reply with no tools comes here
            return (), [piece]
        self._held.append(piece)
        text = "".join(held.text for held in self._held)
        if self._calls.started or self._use.holds(text):
            return self._calls.feed(text), []
        held, self._held = self._held, None
        return [], held

    def finish(self) -> tuple[list[TokenText], bool]:
        """At the end of a reply that came to its end: the text still held (where the reply
        turned out not to be calls), and whether it was calls. No call delta is left by then:
        the reader read every piece as it came."""
        if self._held is None:
            return [], False
        if self._calls.started:
            return [], bool(self._calls.end())
        return self._held, False
