"""The layout is the architecture: core imports no UI; layers only depend downward."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

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


def test_import_contracts_hold() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "importlinter.cli", "--config", str(ROOT / "pyproject.toml")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if out.returncode != 0 and "No module named" in out.stderr:
        out = subprocess.run(
            [str(Path(sys.executable).parent / "lint-imports")],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.lower() or " 0 broken" in out.stdout.lower()


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {"infertui"}
    for top in ("core", "tui"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            found.add(".".join(("infertui", *rel)))
    assert found == listed
