"""The `infertui` command line: `host` serves models, `connect` chats with a host, `ask` sends
one prompt, `hosts` lists a topic's hosts, `id` prints this machine's IDs, `config` shows the
settings file."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from infertui.core import config
from infertui.core.logging import configure_console
from infertui.core.version import infertui_version

from . import flags
from .models import MODEL_COMMANDS, add_model_commands, run_model_command

log = logging.getLogger(__name__)

DESCRIPTION = """\
Serve and use a local LLM from a terminal.

  infertui host                 serve the bundled SmolLM2 135M model
  infertui host --model m.gguf  serve your own GGUF model(s)
  infertui host --http          also serve the HTTP API on 127.0.0.1:8080
  infertui id                   this machine's server ID (what clients connect to)
  infertui connect ID|URL       chat with a host (server ID over Hyperswarm, or http://…)
  infertui connect topic:NAME   chat with the hosts on a topic (the least busy answers)
  infertui ask ID|URL "prompt"  one answer on stdout, for scripts (a part `-` is stdin)
  infertui pull NAME            fetch a model (hf.co/ORG/REPO:Q4_K_M, llama3.2:1b, URL)
  infertui list | show | rm     the models in the library
  infertui config path          where the settings file lives

Settings come from the config file, then INFERTUI_* environment variables, then flags.
"""


LOCAL_HOST = "http://127.0.0.1:8080"  # where `infertui host --http` listens by default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infertui", description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default: INFO"
    )
    parser.add_argument(
        "--version", action="version", version=f"infertui {infertui_version()}",
        help="print the version and exit",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    host = commands.add_parser(
        "host",
        help="serve GGUF models to many clients at once",
        description="Load GGUF models with llama.cpp and serve them with continuous batching.",
    )
    add_host_flags(host)

    ident = commands.add_parser(
        "id",
        help="print this machine's server ID (for `infertui connect $(ssh gpu-box infertui id)`)",
        description="Print this machine's server ID: what `infertui connect` and `ask` take to "
        "reach the host here over Hyperswarm. It is stable across restarts (its key pair lives "
        "under the data directory); --client prints the key this machine connects with.",
    )
    ident.add_argument("--reset-id", action="store_true", help="make a new key pair first")
    ident.add_argument(
        "--client",
        action="store_true",
        help="this machine's client key instead (what a host's --admin or --allow names)",
    )

    connect = commands.add_parser(
        "connect",
        help="chat with a host: streamed replies, abort, queue/metrics dashboards, engines",
        description="The chat app. TARGET is a server ID (Hyperswarm), an http(s) URL, or "
        "topic:NAME for every host on that topic: each chat goes to the one with room, and "
        "to the next when it is busy or leaves.",
    )
    add_client_flags(connect)

    ask = commands.add_parser(
        "ask",
        help="stream one answer to stdout (for scripts and pipes)",
        description="Ask once and stream the answer to stdout. Exit 1 on an error, 130 on Ctrl-C.",
    )
    add_client_flags(ask)
    ask.add_argument(
        "prompt", nargs="+",
        help="the question, in one or more parts joined by blank lines; a part - is stdin "
        "(git diff | infertui ask ID 'A commit message for:' -)",
    )  # fmt: skip
    ask.add_argument("--json", action="store_true", help="print NDJSON events instead of text")

    running = commands.add_parser(
        "ps",
        help="the models a host has in memory, and until when each stays",
        description="List a host's loaded models: size, CPU or GPU, context, and until when "
        "each stays (a model loaded on demand unloads after its keep_alive).",
    )
    add_client_flags(running, default=LOCAL_HOST, chat=False)

    hosts = commands.add_parser(
        "hosts",
        help="list the hosts that announce on a topic",
        description="Look for hosts started with `--topic NAME` on the Hyperswarm DHT and print "
        "one line each: server ID, name, status and models.",
    )
    hosts.add_argument("--topic", required=True, metavar="NAME", help="the topic to look on")
    hosts.add_argument(
        "--bootstrap", action="append", metavar="HOST:PORT", help="a private DHT's node"
    )
    hosts.add_argument(
        "--wait", type=float, default=5.0, metavar="S", help="how long to look (default 5 s)"
    )

    add_model_commands(commands)

    cfg = commands.add_parser("config", help="show where the settings file is")
    cfg.add_argument(
        "action",
        nargs="?",
        default="path",
        choices=["path"],
        help="path (the default): print the config file's location",
    )
    return parser


def add_client_flags(
    parser: argparse.ArgumentParser, *, default: str | None = None, chat: bool = True
) -> None:
    """TARGET, and the client's flags (without `chat`, only those that reach the host); with
    a `default`, TARGET may be left out."""
    said = "a server ID, http(s)://HOST:PORT, or topic:NAME"
    if default is None:
        parser.add_argument("target", metavar="TARGET", help=said)
    else:
        parser.add_argument(
            "target", metavar="TARGET", nargs="?", default=default,
            help=f"{said} (default {default}: a host started with --http on this machine)",
        )  # fmt: skip
    flags.add_flags(parser, flags.CLIENT_FLAGS if chat else flags.CONNECTION_FLAGS)


def client_overrides(args: argparse.Namespace) -> dict[str, Any]:
    given = flags.CONNECTION_FLAGS if args.command == "ps" else flags.CLIENT_FLAGS
    return {"log_level": args.log_level, **flags.overrides(args, given)}


def add_host_flags(host: argparse.ArgumentParser) -> None:
    """The settings' flags (flags.py: each from its field in core/config/), and two of the run's
    own."""
    flags.add_flags(host, flags.HOST_FLAGS)
    host.add_argument(
        "--reset-id", action="store_true", help="make a new key pair, and so a new server ID"
    )
    host.add_argument(
        "--headless",
        action="store_true",
        help="plain log lines on stderr instead of the dashboard (for systemd or nohup)",
    )


def host_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"log_level": args.log_level, **flags.overrides(args, flags.HOST_FLAGS)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "config":
        sys.stdout.write(f"{config.config_path()}\n")
        return 0
    if args.command == "hosts":
        return list_hosts(args)
    if args.command in MODEL_COMMANDS:
        try:
            settings = config.load_settings()  # (the model folders)
        except Exception as exc:  # a bad config file or variable: say so, no traceback
            return settings_failed(exc)
        return run_model_command(args, settings)
    if args.command == "id":
        from infertui.core.transport.p2p.ids import Role, load_seed, server_id

        role: Role = "client" if args.client else "host"
        sys.stdout.write(f"{server_id(load_seed(reset=args.reset_id, role=role))}\n")
        return 0
    if args.command in ("ask", "connect", "ps"):
        try:
            settings = config.load_settings(**client_overrides(args))
        except Exception as exc:  # a bad flag, config file or variable: say so, no traceback
            return settings_failed(exc, args)
        if args.command == "ask":
            return run_ask(args, settings)
        if args.command == "ps":
            import asyncio

            from .ps import ps

            configure_console(settings.log_level if args.log_level else "WARNING")
            return asyncio.run(ps(args.target, settings))
        from infertui.tui.app import run_client_app

        return run_client_app(args.target, settings)
    if args.command == "host":
        try:
            settings = config.load_settings(**host_overrides(args))
        except Exception as exc:  # a bad flag, config file or variable: say so, no traceback
            return settings_failed(exc, args)
        if args.headless or not sys.stdout.isatty():
            from .host import run_headless

            configure_console(settings.log_level)
            return run_headless(settings, reset_id=args.reset_id)
        return run_dashboard(settings, reset_id=args.reset_id)
    parser.print_help()
    return 0


def settings_failed(exc: Exception, args: argparse.Namespace | None = None) -> int:
    """Say which setting is wrong: the flag, where a flag gave it, else the settings."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and args is not None:
        first = exc.errors()[0]
        command_flags = flags.HOST_FLAGS if args.command == "host" else flags.CLIENT_FLAGS
        if named := flags.flag_given_for(first["loc"], args, command_flags):
            flag, given = named
            if isinstance(given, list):
                given = " ".join(map(str, given))
            sys.stderr.write(f"infertui: {flag} {given}: {first['msg'].lower()}\n")
            return 2
    problem = config.first_problem(exc) if isinstance(exc, ValidationError) else str(exc)
    sys.stderr.write(f"infertui: invalid settings: {problem} (see `infertui config path`)\n")
    return 2


def run_dashboard(settings: config.Settings, *, reset_id: bool) -> int:
    from infertui.core.protocol import InferError
    from infertui.tui.app import run_host_app

    from .host import build_service

    try:
        service = build_service(settings, reset_id=reset_id)
    except InferError as exc:
        sys.stderr.write(f"infertui: cannot start: {exc.message}\n")
        return 2
    return run_host_app(service, settings)


def run_ask(args: argparse.Namespace, settings: config.Settings) -> int:
    import asyncio

    from .ask import ask

    configure_console(settings.log_level if args.log_level else "WARNING")
    # stdin only where a part says "-": read whenever it is not a terminal, as Ollama does,
    # it would hang `ssh box infertui ask ...` scripts, whose stdin stays open
    piped = sys.stdin.read() if "-" in args.prompt else ""
    prompt = "\n\n".join(piped if part == "-" else part for part in args.prompt)
    if not prompt.strip():
        sys.stderr.write("infertui: the prompt is empty\n")
        return 2
    flag_limit = flags.flag_given_for(("client", "max_tokens"), args, flags.CLIENT_FLAGS)
    return asyncio.run(
        ask(args.target, prompt, settings, as_json=args.json, quiet_limit=flag_limit is not None)
    )


def list_hosts(args: argparse.Namespace) -> int:
    """`infertui hosts --topic NAME`: one line per host found, with its server info."""
    import asyncio

    from infertui.core.protocol import InferError
    from infertui.core.transport.p2p.discovery import find_hosts

    try:
        bootstrap = args.bootstrap or config.load_settings().bootstrap
    except Exception as exc:  # a malformed config file or variable, as for the other commands
        return settings_failed(exc)
    try:
        found = asyncio.run(find_hosts(args.topic, bootstrap=bootstrap, wait_s=args.wait))
    except InferError as exc:
        sys.stderr.write(f"infertui: {exc.message}\n")
        return 1
    if not found:
        sys.stderr.write(f"no host announces on topic '{args.topic}'\n")
        return 1
    for info in found:
        models = ", ".join(info.models) or info.model
        sys.stdout.write(f"{info.server_id}  {info.host_name}  {info.status}  {models}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
