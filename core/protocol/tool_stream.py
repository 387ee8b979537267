"""The one reader of tool calls in model output. A reply is read as it grows, so that a stream
sends each call's name as soon as it is whole and its arguments as they grow (OpenAI's
streamed `tool_calls` deltas); a whole reply is the same stream, fed at once and ended.

The reply is scanned as JSON as it grows: an object with a string "name" that is not inside
another call's arguments is a call, and the raw text of its arguments' value (Llama 3.x:
"parameters") is what streams. Outside calls, the formats' markers (tool_formats.py) are
skipped whole and any other text is passed over, so one scanner reads every format: Hermes
blocks, Mistral's list, Llama 3.x objects (`;` between them or not) and the generic
`{"tool_calls": [...]}`. Arguments given as a JSON string (OpenAI's own shape, echoed by some
models) come whole, once the string is closed.

Whether a reply is calls at all is decided by its head (`may_be_a_call`, what a stream holds
back), unless a call is forced, and, once it is whole, by `whole_calls`. Every reader here
returns whatever the model wrote (issue 34 §5).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field

from .json_text import read_json
from .tool_formats import ARGUMENT_KEYS, MARKERS, OPENINGS

_LITERAL_END = re.compile(r"[,}\] \t\r\n]")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call read out of a whole reply."""

    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = ""

    def with_id(self) -> ToolCall:
        return ToolCall(self.name, self.arguments, self.id or new_call_id())


def new_call_id() -> str:
    return f"call_{secrets.token_hex(8)}"


def may_be_a_call(text: str) -> bool:
    """Whether a reply that starts so could still turn out to be tool calls (a stream holds
    such text back until it knows)."""
    head = text.lstrip()
    return any(o.startswith(head) or head.startswith(o) for o in OPENINGS)


def parse_calls(text: str, names: set[str], *, forced: bool = False) -> list[ToolCall]:
    """The calls of offered tools in a whole reply, read as a stream of it reads them
    (`whole_calls`); [] where it is not calls: a reply whose head cannot open a call is text,
    unless a call is forced."""
    if not names or not (forced or may_be_a_call(text)):
        return []
    return whole_calls(CallScanner().scan(text), names)


def whole_calls(calls: list[PartialCall], names: set[str]) -> list[ToolCall]:
    """The calls of a reply that is whole: those written whole, each with arguments (none
    given: {}) that are a JSON object, written again as JSON a client's parser reads. [] where
    a call names a tool that is not offered: the reply is text that only looks like calls."""
    found: list[ToolCall] = []
    for call in calls:
        if call.name is None or call.name not in names:
            return []
        if call.given:
            written = call.arguments if call.whole else None
        else:  # none, which a call may leave out, once its object is closed
            written = "{}" if call.closed else None
        arguments = read_json(written)
        if isinstance(arguments, dict):
            found.append(ToolCall(call.name, _as_sent(written, arguments)))
    return found


def _as_sent(written: str | None, arguments: dict[str, object]) -> str:
    """The arguments as the model wrote them where that is already strict JSON, so that a
    whole reply's call says what the stream's deltas said; else written again as JSON."""
    try:
        if written is not None and json.loads(written) == arguments:
            return written.strip()
    except ValueError:
        pass
    return json.dumps(arguments)


@dataclass(slots=True)
class PartialCall:
    """A call as far as it is written: its name once whole, its arguments' text so far."""

    name: str | None = None
    arguments: str = ""
    whole: bool = False  # the arguments' value is closed
    given: bool = False  # an arguments value began: a stream sends that one, no later one
    closed: bool = False  # the call's object is closed


@dataclass(slots=True)
class _Frame:
    """An open JSON container while scanning."""

    is_object: bool
    call: PartialCall | None = None  # an object not inside arguments: maybe a call
    arguments_of: PartialCall | None = None  # this container is that call's arguments
    start: int = 0
    in_arguments: bool = False
    key: str | None = None  # the key whose value comes next (objects)
    expect_key: bool = True


class CallScanner:
    """Reads a reply as it grows: each `scan` is given the whole reply so far (which only
    grows) and goes on from where the last one stopped, so a long call is read once, not once
    per token. It stops before a string, a marker or a literal that is not whole yet."""

    def __init__(self) -> None:
        self.calls: list[PartialCall] = []  # in the order their names came
        self._stack: list[_Frame] = []
        self._i = 0

    def scan(self, text: str) -> list[PartialCall]:
        stack, calls = self._stack, self.calls
        i, n = self._i, len(text)
        while i < n:
            c = text[i]
            if not stack and c not in "{[":  # outside calls: a marker, or text passed over
                marker = next((m for m in MARKERS if text.startswith(m[: n - i], i)), None)
                if marker is None:
                    i += 1
                elif n - i < len(marker):
                    break  # partly written: wait for the rest
                else:
                    i += len(marker)
                continue
            if c.isspace():
                i += 1
                continue
            frame = stack[-1] if stack else None
            if frame is not None and frame.is_object and frame.expect_key:
                if c == '"':
                    end = _string_end(text, i)
                    if end is None:
                        break
                    frame.key, frame.expect_key = _string(text[i : end + 1]), False
                    i = end + 1
                elif c == "}":
                    _close(stack, text, i)
                    i += 1
                else:
                    i += 1  # a comma between members
                continue
            if c in ":,":
                i += 1
                continue
            if c in "}]":
                _close(stack, text, i)
                i += 1
                continue
            # a value: of `frame.key` in an object, an item in an array, or a whole document
            owner = frame.call if frame is not None and frame.is_object else None
            is_arguments = owner is not None and frame is not None and frame.key in ARGUMENT_KEYS
            inside = frame is not None and (frame.in_arguments or frame.arguments_of is not None)
            if c in "{[":
                # a second arguments value (a repeated key) is read as arguments, not calls
                child = _Frame(is_object=c == "{", start=i, in_arguments=inside or is_arguments)
                if is_arguments and owner is not None and not owner.given:
                    child.arguments_of, owner.given = owner, True
                elif child.is_object and not child.in_arguments:
                    child.call = PartialCall()  # a call once it has a name
                stack.append(child)
                i += 1
            elif c == '"':
                end = _string_end(text, i)
                if end is None:
                    break
                # the first name and arguments stand, as a stream has sent them; a string
                # that is no valid JSON string gives neither
                if owner is not None and frame is not None and frame.key == "name":
                    if owner.name is None and (name := _string(text[i : end + 1])) is not None:
                        owner.name = name
                        calls.append(owner)
                elif owner is not None and is_arguments and not owner.given:
                    owner.given = True
                    if (value := _string(text[i : end + 1])) is not None:
                        owner.arguments, owner.whole = value, True
                i = end + 1
            else:  # a number, true, false or null
                after = _LITERAL_END.search(text, i)
                if after is None:
                    break  # perhaps not whole yet: read again with what follows
                if owner is not None and is_arguments:
                    owner.given = True  # no object: these arguments are never whole
                i = after.start()
            if frame is not None and frame.is_object:
                frame.key, frame.expect_key = None, True
        self._i = i
        for frame in stack:  # arguments still being written: what there is so far
            if frame.arguments_of is not None and not frame.arguments_of.whole:
                frame.arguments_of.arguments = text[frame.start :].rstrip()
        return calls


def partial_calls(text: str) -> list[PartialCall]:
    """The calls in a reply so far, each as far as it is written."""
    return CallScanner().scan(text)


def _close(stack: list[_Frame], text: str, i: int) -> None:
    frame = stack.pop()
    if frame.call is not None:
        frame.call.closed = True
    if frame.arguments_of is not None:
        frame.arguments_of.arguments = text[frame.start : i + 1]
        frame.arguments_of.whole = True
    if stack and stack[-1].is_object:
        stack[-1].key, stack[-1].expect_key = None, True


def _string(token: str) -> str | None:
    """A JSON string's value; None where the model wrote no valid one (a bad escape, a lone
    surrogate): never raises, whatever the model wrote (issue 34 §5). Raw control characters
    are read, as read_json reads them."""
    value = read_json(token)
    return value if isinstance(value, str) else None


def _string_end(text: str, i: int) -> int | None:
    """The index of the quote closing the string that opens at i; None if not written yet."""
    j = i
    while (j := text.find('"', j + 1)) >= 0:
        k = j - 1
        while text[k] == "\\":
            k -= 1
        if (j - 1 - k) % 2 == 0:  # an even run of backslashes escapes nothing
            return j
    return None


@dataclass(slots=True)
class CallDelta:
    """One piece of a streamed call: its head (id and name) or more of its arguments."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(slots=True)
class CallStream:
    """What of a reply's calls has been sent; `feed` gives what is new. Calls go out in order,
    each once its name is whole and names an offered tool; a name that is not offered stops
    the stream. At the end, `end` judges the reply whole."""

    names: set[str]
    sent: list[int] = field(default_factory=list)  # characters of arguments sent, per call
    stopped: bool = False
    scanner: CallScanner = field(default_factory=CallScanner)

    @property
    def started(self) -> bool:
        return bool(self.sent)

    def feed(self, text: str) -> list[CallDelta]:
        out: list[CallDelta] = []
        if self.stopped:
            return out
        for k, call in enumerate(self.scanner.scan(text)):
            if k == len(self.sent):
                if call.name not in self.names:
                    self.stopped = True
                    return out
                out.append(CallDelta(k, id=new_call_id(), name=call.name))
                self.sent.append(0)
            if len(call.arguments) > self.sent[k]:
                out.append(CallDelta(k, arguments=call.arguments[self.sent[k] :]))
                self.sent[k] = len(call.arguments)
        return out

    def end(self) -> list[ToolCall]:
        """The reply's calls, now that it has come to its end (`whole_calls`): a reply read
        in pieces reads as the same reply read at once."""
        return whole_calls(self.scanner.calls, self.names)
