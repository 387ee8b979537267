"""The one prepare step: what a face asks (an `Ask`, in no dialect) becomes the job its engine
runs (a `PreparedJob`). Every face goes through it, by HostService.submit.

The engine decides how a request is written: a chat template that renders tools gets them
beside the turns, and a forced call's grammar in that template's call format; any other engine
reads the tools described in a system turn. An engine that tokenizes here gets the prompt as its
tokens; one that tokenizes on its server (an upstream) gets the turns or the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..engine import Engine
from ..protocol.common import ChatMessage, SamplingParams, without_oldest_turn
from ..protocol.errors import ErrorKind, InferError
from ..protocol.shares import Priority
from ..protocol.tools import GENERIC_FORMAT, Forced, Tool, conversation, forcing_schema
from ..scheduler import PreparedJob


@dataclass(frozen=True, kw_only=True)
class Ask:
    """What a face asks of the host: a conversation (`messages`) or a plain completion
    (`prompt`) on the engine `model` names (the default one; or, with `pool_id`, that pool and
    no other), how to sample it, the tools its reply may call, and who asks."""

    params: SamplingParams
    model: str | None = None
    pool_id: str | None = None  # a pin (spec 002): this pool or a typed error, never another
    messages: Sequence[ChatMessage] | None = None
    prompt: str | None = None
    tools: Sequence[Tool] = ()  # offered to the reply
    forced: Forced | None = None  # the reply must call one of `tools`
    drop_oldest: bool = False  # past the context, the oldest turns are left out (Ollama's)
    embed: bool = False  # the prompt's embedding, not a completion of it
    keep_alive_s: float | None = None  # how long a model loaded on demand stays; None: default
    client_id: str | None = None  # the connection
    client_limit: int | None = None  # jobs this client may have at once
    identity: str | None = None  # who asks: an API key's name, a named peer; None: client_id
    priority: Priority | None = None  # interactive or batch; None: the identity's usual
    session_id: str | None = None
    job_id: str | None = None
    correlation_id: str | None = None

    @property
    def size(self) -> int:
        """Characters to read: what tokenizing costs grows with it."""
        turns = self.messages or ()
        return len(self.prompt or "") + sum(len(message.content) for message in turns)

    def without_oldest_turn(self) -> Ask | None:
        """The same ask with its oldest exchange after the system turns left out; None when
        only the question asked now is left."""
        turns = list(self.messages or ())
        system = next((i for i, m in enumerate(turns) if m.role != "system"), len(turns))
        later = without_oldest_turn(turns, system)
        if later is None:
            return None
        return replace(self, messages=[*turns[:system], *turns[later:]])


def prepare(engine: Engine, ask: Ask) -> PreparedJob:
    """The job `ask` means on `engine`: its turns and tools written as the engine reads them,
    and tokenized where it tokenizes. Any thread: a long prompt is worth running on one."""
    params, messages, tools = ask.params, ask.messages, None
    if messages is not None:
        form = engine.chat_format.tools if ask.tools else GENERIC_FORMAT
        if ask.tools and form != GENERIC_FORMAT:  # the template renders them
            tools = [tool.model_dump() for tool in ask.tools]
        if ask.forced is not None:
            schema, wrap = forcing_schema(ask.tools, parallel=ask.forced == "several", form=form)
            params = params.model_copy(update={"json_schema": schema, "json_wrap": wrap})
        messages = conversation(messages, ask.tools, form)
    tokenizer = engine.tokenizer
    if tokenizer is None:  # its server renders and tokenizes
        tokens: list[int] = []
    elif messages is not None:
        tokens = tokenizer.chat_prompt(messages, tools)
    elif ask.prompt is not None:
        tokens = tokenizer.text_prompt(ask.prompt)
    else:
        raise InferError(ErrorKind.INVALID_PARAMS, "a job needs messages or a prompt")
    return PreparedJob(
        params=params,
        tokens=tokens,
        messages=messages,
        prompt=ask.prompt if messages is None else None,
        embed=ask.embed,
        client_id=ask.client_id,
        client_limit=ask.client_limit,
        identity=ask.identity,
        priority=ask.priority,
        session_id=ask.session_id,
        job_id=ask.job_id,
        correlation_id=ask.correlation_id,
    )
