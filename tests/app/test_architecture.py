"""The layout is the architecture: core imports no UI; layers only depend downward."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_core_imports_without_textual_rich_or_the_tui() -> None:
    code = (
        "import sys, importlib, pkgutil, infertui.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'infertui.core.'):\n"
        "    importlib.import_module(m.name)\n"
        # httpx imports its optional CLI (and so rich) whenever rich is installed
        "ui = ('textual',) if 'httpx._main' in sys.modules else ('textual', 'rich')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ui or m.startswith('infertui.tui')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _layering() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layering", ROOT / "tools" / "layering.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_import_rules_hold() -> None:
    assert list(_layering().violations(ROOT)) == []


@pytest.mark.parametrize(
    ("file", "line", "rule"),
    [
        ("core/engine/llama/sampler.py", "import textual", "core never imports the UI"),
        ("core/protocol/common.py", "from ..config import Settings",
         "protocol depends on nothing else in core"),
        ("core/engine/llama/memory.py", "from ...host import service",
         "core layers: infertui.core.engine never imports infertui.core.host"),
        # indirect: scheduler -> (a new helper in protocol) -> host
        ("core/protocol/events.py", "from infertui.core.host import HostService",
         "core layers: infertui.core.scheduler never imports infertui.core.host"),
        ("core/transport/http/app.py", "from ...engine.llama.native import Batch",
         "transports and the client use the host's interface, never engine internals"),
        ("tui/local.py", "from infertui.core.scheduler import Pool",
         "faces reach pools and the engine registry only through HostService"),
        ("core/transport/p2p/admin.py", "from ...host.registry import EngineRegistry",
         "faces reach pools and the engine registry only through HostService"),
        ("core/client/http.py", "from ..scheduler import Job",
         "the client reaches a host only through a transport"),
        ("tui/screens/chat.py", "from infertui.core.host import HostService",
         "screens and widgets reach the host only through core.client"),
        ("tui/app.py", "from infertui.core.protocol.errors import InferError",
         "the tui takes protocol names from infertui.core.protocol, not its modules"),
        ("tui/widgets/message.py", "import llama_cpp", "nothing outside core.engine imports llama_cpp"),
        ("tui/screens/chat.py", "from infertui.app.ask import ask",
         "only the command line starts the app: core and the tui never import infertui.app"),
        ("core/library/store.py", "from ..host import HostService",
         "the library fetches and files models: it never reaches an engine, pool, host or face"),
    ],
)  # fmt: skip
def test_a_planted_import_breaks_its_rule(tmp_path: Path, file: str, line: str, rule: str) -> None:
    """The rules can fail: a forbidden import planted in a copy of the tree is found."""
    for folder in ("core", "tui", "app", "infertui_pkg"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    target = tmp_path / file
    target.write_text(target.read_text() + f"\n{line}\n")
    found = list(_layering().violations(tmp_path))
    assert any(v.startswith(rule + ":") for v in found), found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {"infertui"}
    for top in ("core", "tui", "app"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            found.add(".".join(("infertui", *rel)))
    assert found == listed


def test_openmps_waiting_is_set_before_llama_cpp_loads() -> None:
    """libgomp reads its environment once, when llama.cpp's CPU backend loads it: the engines'
    package sets it first (core/engine/openmp.py), and libgomp itself, asked in a fresh
    process, holds the policy and the spin count."""
    init = (ROOT / "core" / "engine" / "__init__.py").read_text()
    imports = [line for line in init.splitlines() if line.startswith(("from ", "import "))]
    assert imports[0].startswith("from . import openmp")
    probe = (
        "import ctypes, infertui.core.engine, llama_cpp;"
        "ctypes.CDLL('libgomp.so.1').omp_display_env(1)"
    )
    unset = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    if "OMP_WAIT_POLICY" not in out.stderr:
        pytest.skip(f"no libgomp to ask here: {out.stderr[-200:]}")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in out.stderr
    assert "GOMP_SPINCOUNT = '300000'" in out.stderr
