"""Command-line flags made from the settings' fields (core/config/).

A flag names the setting it gives (`host.engine.ctx`); its type, choices, default and help are
that field's, so each setting is declared once, in core/config/. Every engine setting is a flag
of its own name (`EngineDefaults.ctx` is `--ctx`): a new one needs no line here. What a flag
gives goes to `load_settings` as nested dicts, and a bad value is said under the flag's name.
"""

from __future__ import annotations

import argparse
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from infertui.core.config import EngineDefaults, Settings


def parallel_value(text: str) -> int | str:
    """`--parallel`: a positive number of slots, or auto."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("needs at least 1 slot")
    return value


@dataclass(frozen=True, slots=True)
class Flag:
    """A flag and the setting it gives: `path` is the field's place in `Settings`."""

    names: tuple[str, ...]  # the first is its name; the others are aliases
    path: str
    metavar: str | None = None
    # Only where this command means the field otherwise: --no-p2p turns `enabled` off, and
    # `api_key` is what a host requires but what a client sends.
    help: str | None = None
    const: Any = None  # what the flag gives when it comes alone (--http), or is a switch to
    type: Callable[[str], Any] | None = None  # where the field's type says too little
    loc: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "loc", tuple(self.path.split(".")))

    @property
    def dest(self) -> str:
        return self.names[0].removeprefix("--").replace("-", "_")


# How the engine flags look where a field's type alone would say it worse
_ENGINE_LOOKS: dict[str, dict[str, Any]] = {
    "main_gpu": {"metavar": "ID"},
    "parallel": {"metavar": "N|auto", "type": parallel_value},
    "chat_template": {"metavar": "FILE"},
    "draft": {"metavar": "FILE"},
}


def engine_flags() -> tuple[Flag, ...]:
    """One flag per engine setting, under its own name."""
    return tuple(
        Flag(("--" + name.replace("_", "-"),), f"host.engine.{name}", **_ENGINE_LOOKS.get(name, {}))
        for name in EngineDefaults.model_fields
    )


HOST_FLAGS: tuple[Flag, ...] = (
    Flag(("--model",), "host.models", metavar="[ID=]PATH"),
    Flag(("--upstream",), "host.upstream.urls", metavar="[ID=]URL"),
    Flag(("--upstream-model",), "host.upstream.model", metavar="NAME"),
    Flag(("--upstream-key",), "host.upstream.api_key", metavar="KEY"),
    Flag(("--upstream-concurrency",), "host.upstream.concurrency"),
    *engine_flags(),
    Flag(("--queue",), "host.queue"),
    Flag(("--keep-alive",), "host.keep_alive", metavar="DURATION"),
    Flag(("--memory-budget",), "host.memory_budget_mb", metavar="MIB"),
    Flag(("--max-loaded",), "host.max_loaded"),
    Flag(("--http",), "host.http.listen", metavar="[HOST:]PORT", const="127.0.0.1:8080"),
    Flag(
        ("--api-key",),
        "api_key",
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on HTTP (or set INFERTUI_API_KEY)",
    ),
    Flag(("--admin-key",), "admin_key", metavar="KEY"),
    Flag(("--keys-file",), "host.keys_file", metavar="PATH"),
    Flag(("--interactive-slots",), "host.shares.interactive_slots", metavar="N"),
    Flag(
        ("--no-ledger",),
        "host.ledger.enabled",
        const=False,
        help="keep no usage ledger (default: a record per job in the data dir)",
    ),
    Flag(("--origins", "--cors-origin"), "host.http.cors_origins", metavar="ORIGIN[,ORIGIN]"),
    Flag(
        ("--no-p2p",),
        "host.p2p.enabled",
        const=False,
        help="do not listen on Hyperswarm (default: listen)",
    ),
    Flag(("--topic",), "host.p2p.topics", metavar="NAME"),
    Flag(("--bootstrap",), "bootstrap", metavar="HOST:PORT"),
    Flag(("--allow",), "host.p2p.allow", metavar="[NAME=]SERVER_ID"),
    Flag(("--allow-file",), "host.p2p.allow_file", metavar="PATH"),
    Flag(("--admin",), "host.p2p.admins", metavar="SERVER_ID"),
    Flag(("--share",), "host.p2p.share", metavar="SERVER_ID"),
)

# How a client reaches a host (every client command), then what a chat asks of it.
CONNECTION_FLAGS: tuple[Flag, ...] = (
    Flag(
        ("--api-key",),
        "api_key",
        metavar="KEY",
        help="for an HTTP host that wants one (its admin key manages engines)",
    ),
    Flag(("--bootstrap",), "bootstrap", metavar="HOST:PORT"),
)
CLIENT_FLAGS: tuple[Flag, ...] = (
    *CONNECTION_FLAGS,
    Flag(("--model",), "client.model", metavar="ID"),
    Flag(("--system",), "client.system_prompt", metavar="TEXT"),
    Flag(("--temperature",), "client.temperature", metavar="T"),
    Flag(("--max-tokens",), "client.max_tokens", metavar="N"),
)


def field_at(loc: Sequence[str]) -> FieldInfo:
    """The settings field at `loc`, e.g. ("host", "engine", "ctx")."""
    model: type[BaseModel] = Settings
    for depth, name in enumerate(loc, 1):
        info = model.model_fields[name]
        if depth == len(loc):
            return info
        nested = info.annotation
        if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
            break
        model = nested
    raise KeyError(f"no setting {'.'.join(loc)}")


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a field's annotation means on the command line."""

    base: type  # int, float, str or bool
    many: bool = False  # a list: the flag is repeatable
    choices: tuple[str, ...] | None = None


def shape_of(annotation: Any) -> _Shape:
    """int, `int | None`, `Annotated[...]`, `Literal[...]`, `list[str]` or `SecretStr`, as
    argparse takes them. Where a union holds a number and words (`parallel`), the number
    decides the type: the flag's own `type` reads the words."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return shape_of(get_args(annotation)[0])
    if origin is Literal:
        return _Shape(str, choices=tuple(str(word) for word in get_args(annotation)))
    if origin is list:
        return _Shape(shape_of(get_args(annotation)[0]).base, many=True)
    if origin in (Union, types.UnionType):
        options = [shape_of(arg) for arg in get_args(annotation) if arg is not type(None)]
        numbers = [option for option in options if option.base in (int, float)]
        return numbers[0] if len(options) > 1 and numbers else options[0]
    if annotation is SecretStr:
        return _Shape(str)
    assert annotation in (int, float, str, bool), annotation
    return _Shape(annotation)


def help_of(flag: Flag, info: FieldInfo) -> str:
    """The field's description, with what the command line adds: the default, what the flag
    gives alone, that it repeats."""
    shape = shape_of(info.annotation)
    text = flag.help or info.description or ""
    if flag.help is None and flag.const is not None and shape.base is not bool:
        text += f"; alone: {flag.const}"
    if shape.many:
        text += " (repeatable)"
    elif info.default not in (None, "", False) and "default" not in text:
        # (a switch off by default says nothing; a text that says its default is not told
        # again: "--no-p2p ... (default: listen) (default True)")
        text += f" (default {info.default})"
    return text.replace("%", "%%")  # argparse formats help with %


def add_flags(parser: argparse.ArgumentParser, flags: Sequence[Flag]) -> None:
    """Each flag on the parser, left None when not given: a flag not given hides nothing."""
    for flag in flags:
        info = field_at(flag.loc)
        shape = shape_of(info.annotation)
        options: dict[str, Any] = {"dest": flag.dest, "help": help_of(flag, info)}
        if shape.base is bool and flag.const is not None:
            options.update(action="store_const", const=flag.const)
        elif shape.base is bool:  # --deterministic, and --no-deterministic over a file's
            options.update(action=argparse.BooleanOptionalAction)
        else:
            options.update(type=flag.type or shape.base, choices=shape.choices)
            if shape.choices is None:
                options["metavar"] = flag.metavar or ("N" if shape.base is int else "X")
            if shape.many:
                options["action"] = "append"
            if flag.const is not None:
                options.update(nargs="?", const=flag.const)
        parser.add_argument(*flag.names, **options)


def overrides(args: argparse.Namespace, flags: Sequence[Flag]) -> dict[str, Any]:
    """The flags given, as `load_settings` takes them: `{"host": {"engine": {"ctx": 512}}}`."""
    given: dict[str, Any] = {}
    for flag in flags:
        value = getattr(args, flag.dest)
        if value is None:
            continue
        *parents, name = flag.loc
        node = given
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = value
    return given


def flag_given_for(
    loc: Sequence[str | int], args: argparse.Namespace, flags: Sequence[Flag]
) -> tuple[str, Any] | None:
    """The flag, and the value it was given, behind the setting at a validation error's `loc`
    (`("host", "engine", "ctx")`); None where no flag gave it (the file, the environment)."""
    for flag in flags:
        if tuple(loc[: len(flag.loc)]) == flag.loc:
            value = getattr(args, flag.dest, None)
            if value is not None:
                return flag.names[0], value
    return None
