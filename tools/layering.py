"""The import rules that keep infertui's floors apart, checked on the source.

    .venv/bin/python tools/layering.py        # one line per broken rule; exit status 1 if any

Every module's imports are read from its syntax tree (imports inside functions and
TYPE_CHECKING blocks count too) and resolved to module names under the `infertui` package,
whose parts live in `core/`, `tui/` and `app/` (the package-dir mapping in pyproject.toml). A rule
forbids a set of modules to a set of sources, directly or also through any chain of infertui's
own modules. Our own checker because import-linter's graph builder cannot see that mapping:
its contracts silently checked nothing.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"infertui.core": "core", "infertui.tui": "tui", "infertui.app": "app"}
UI = ("infertui.tui", "textual", "rich")
CORE_PARTS = ("engine", "scheduler", "host", "transport", "client", "config", "library", "ledger")


@dataclass(frozen=True)
class Rule:
    name: str
    sources: tuple[str, ...]  # the rule covers these modules and everything under them
    forbidden: tuple[str, ...]
    indirect: bool = False  # also through a chain of infertui modules
    exempt: tuple[str, ...] = ()  # sources the rule does not cover


# Floors, top down: a floor may import the ones below it, never one above.
LAYERS = ("infertui.core.host", "infertui.core.scheduler", "infertui.core.engine",
          "infertui.core.protocol")  # fmt: skip

RULES = [
    Rule("core never imports the UI", ("infertui.core",), UI, indirect=True),
    Rule(
        "only the command line starts the app: core and the tui never import infertui.app",
        ("infertui.core", "infertui.tui"),
        ("infertui.app",),
        indirect=True,
    ),
    Rule(
        "protocol depends on nothing else in core",
        ("infertui.core.protocol",),
        tuple(f"infertui.core.{part}" for part in CORE_PARTS),
        indirect=True,
    ),
    *(
        Rule(f"core layers: {low} never imports {high}", (low,), (high,), indirect=True)
        for i, low in enumerate(LAYERS)
        for high in LAYERS[:i]
    ),
    Rule(
        "the library fetches and files models: it never reaches an engine, pool, host or face",
        ("infertui.core.library",),
        tuple(f"infertui.core.{part}" for part in CORE_PARTS[:5]),
        indirect=True,
    ),
    Rule(
        "the ledger keeps records: it never reaches an engine, pool, host, face or the library",
        ("infertui.core.ledger",),
        tuple(f"infertui.core.{part}" for part in CORE_PARTS if part != "ledger"),
        indirect=True,
    ),
    Rule(
        "transports and the client use the host's interface, never engine internals",
        ("infertui.core.transport", "infertui.core.client"),
        ("infertui.core.engine",),
    ),
    Rule(
        "faces reach pools and the engine registry only through HostService",
        ("infertui.core.transport", "infertui.core.client", "infertui.tui"),
        (
            "infertui.core.scheduler.pool",
            "infertui.core.scheduler.Pool",
            "infertui.core.host.registry",
            "infertui.core.host.EngineRegistry",
        ),  # module or name
    ),
    Rule(
        "the client reaches a host only through a transport",
        ("infertui.core.client",),
        ("infertui.core.host", "infertui.core.scheduler", "infertui.core.transport.http"),
        indirect=True,
    ),
    Rule(
        "screens and widgets reach the host only through core.client",
        ("infertui.tui.screens", "infertui.tui.widgets"),
        tuple(f"infertui.core.{part}" for part in ("host", "scheduler", "engine", "transport")),
    ),
    Rule(
        "the tui takes protocol names from infertui.core.protocol, not its modules",
        ("infertui.tui",),
        tuple(
            f"infertui.core.protocol.{m}"
            for m in ("common", "errors", "events", "snapshots", "shares")
        ),
    ),
    Rule(
        "nothing outside core.engine imports llama_cpp",
        ("infertui.core", "infertui.tui"),
        ("llama_cpp",),
        exempt=("infertui.core.engine",),
    ),
]


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every infertui module below `root`, by name."""
    found = {"infertui": root / "infertui_pkg" / "__init__.py"}
    for package, folder in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    """The modules `name` imports: `from a import b` counts as a and as a.b (b may be a
    submodule), and relative imports are made absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def violations(root: Path = ROOT) -> Iterator[str]:
    """One line per rule and source that breaks it, with the first import chain that does."""
    found = modules(root)
    graph = {name: imports(name, path) for name, path in found.items()}
    for rule in RULES:
        covered = (m for m in graph if under(m, rule.sources) and not under(m, rule.exempt))
        for source in sorted(covered):
            for chain in _reach(source, graph, rule.indirect):
                if under(chain[-1], rule.forbidden):
                    yield f"{rule.name}: {' -> '.join(chain)}"
                    break


def _reach(source: str, graph: dict[str, set[str]], indirect: bool) -> Iterator[list[str]]:
    """Each module imported from `source` (through infertui modules when `indirect`), once,
    with the shortest chain that reaches it."""
    chains = {source: [source]}
    todo = [source]
    while todo:
        current = todo.pop(0)
        for target in sorted(graph[current]):
            if target in chains:
                continue
            chains[target] = [*chains[current], target]
            yield chains[target]
            if indirect and target in graph:
                todo.append(target)


def main() -> int:
    broken = list(violations())
    for line in broken:
        sys.stdout.write(f"{line}\n")
    sys.stdout.write(f"{len(RULES)} import rules, {len(broken)} broken\n")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
