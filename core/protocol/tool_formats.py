"""The tool-call formats models are trained on: each one's name (as the engine status gives
it), the markers it writes around calls and the key of a call's arguments, listed once for
the reader of calls (tool_stream.py) and the grammar that forces one (tools.forcing_schema).
"""

from __future__ import annotations

from dataclasses import dataclass

# The generic format is the host's own, for a template that renders no tools: the tools are
# described in a system turn, and a call is the reply {"tool_calls": [{"name", "arguments"}]}.
GENERIC_FORMAT = "generic JSON tool calls"
HERMES = "hermes <tool_call>"  # Hermes 2 Pro, Qwen 2.5 and 3: each call in its own tags
MISTRAL = "mistral [TOOL_CALLS]"  # Mistral v3, Nemo: the marker, then a list of calls
LLAMA3 = "llama 3.x JSON"  # Llama 3.1 to 3.3: a call object, bare or after the python tag


@dataclass(frozen=True, slots=True)
class CallFormat:
    opens: str = ""  # the marker before a call, or before the list of them
    closes: str = ""  # the marker after it
    arguments: str = "arguments"  # the key of a call's arguments


FORMATS: dict[str, CallFormat] = {
    GENERIC_FORMAT: CallFormat(),
    HERMES: CallFormat("<tool_call>", "</tool_call>"),
    MISTRAL: CallFormat("[TOOL_CALLS]"),
    LLAMA3: CallFormat("<|python_tag|>", arguments="parameters"),
}
# What a reply that is calls may start with (after white space): a call object, or a marker
OPENINGS = ("{", *(f.opens for f in FORMATS.values() if f.opens))
MARKERS = tuple(m for f in FORMATS.values() for m in (f.opens, f.closes) if m)
ARGUMENT_KEYS = tuple(dict.fromkeys(f.arguments for f in FORMATS.values()))
