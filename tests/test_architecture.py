"""The layers of docs/architecture.md hold: imports run downward only, and nothing cycles.

The contracts live in pyproject.toml (``[tool.importlinter]``); this runs ``lint-imports``
over the source tree, and over copies of it with one upward import or one cycle added, so
the check is known to catch what it is there to catch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_TIMEOUT_S = 120.0


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``root/src/agentcanvas`` with ``root/pyproject.toml``."""
    exe = Path(sys.executable).with_name("lint-imports")
    command = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [*command, "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=LINT_TIMEOUT_S,
        check=False,
    )


def test_the_package_keeps_its_layers_and_has_no_cycles() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Layers import downward only KEPT" in result.stdout
    assert "No import cycles between sibling packages or modules KEPT" in result.stdout


def _copy_sources(tmp_path: Path) -> Path:
    """The package's Python files and pyproject.toml, copied under ``tmp_path``."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    source = ROOT / "src" / "agentcanvas"
    for path in source.rglob("*.py"):
        target = tmp_path / "src" / "agentcanvas" / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


BREAKAGES = {
    # the catalogue (bottom) reaching up for the fleet, inside a function
    "upward": (
        "catalogue/catalogue.py",
        "\n\ndef _fleet():\n    from agentcanvas.server import fleet\n\n    return fleet\n",
        "Layers import downward only BROKEN",
    ),
    # two modules of one layer importing each other: a cycle, no layer crossed
    "cycle": (
        "eval/seeding.py",
        "\n\ndef _runner():\n    from agentcanvas.eval import runner\n\n    return runner\n",
        "No import cycles between sibling packages or modules BROKEN",
    ),
}


@pytest.mark.parametrize("kind", sorted(BREAKAGES))
def test_an_upward_import_or_a_cycle_breaks_the_check(tmp_path: Path, kind: str) -> None:
    module, added, verdict = BREAKAGES[kind]
    root = _copy_sources(tmp_path)
    with (root / "src" / "agentcanvas" / module).open("a", encoding="utf-8") as f:
        f.write(added)
    result = _lint_imports(root)
    assert result.returncode != 0, result.stdout
    assert verdict in result.stdout, result.stdout


MAX_MODULE_LINES = 450  # the layout rule (docs/architecture.md): split a module past it


def test_no_module_of_the_package_is_over_the_layout_rules_size() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in (ROOT / "src" / "agentcanvas").rglob("*.py")
    }
    assert len(sizes) > 100  # the package was found
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
