"""The node API is ``agentcanvas.nodes``: built-in node sets and the docs import only it.

A node set (built-in or a user's, as docs/*.md show them) imports from ``agentcanvas.nodes``
and nothing deeper (``nodes.base``, ``nodes.manifest``, … are internal). Built-in node sets
may also use their own libraries: other modules under ``agentcanvas.nodesets``, the built-in
models (``agentcanvas.models``) and ``agentcanvas.gridnav``. Lazy imports inside functions
count too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import agentcanvas
import agentcanvas.nodes

ROOT = Path(__file__).resolve().parents[2]
NODESETS = ROOT / "src" / "agentcanvas" / "nodesets"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PYTHON_BLOCK = re.compile(r"```python\n(?P<body>.*?)\n```", re.S)
BUILTIN_LIBRARIES = (
    "agentcanvas.nodesets",
    "agentcanvas.models",
    "agentcanvas.gridnav",
    "agentcanvas.policy_protocol",
)
PUBLIC_MODULES = {"agentcanvas.nodes": agentcanvas.nodes, "agentcanvas": agentcanvas}


def non_public_imports(source: str, libraries: tuple[str, ...] = ()) -> list[str]:
    """Each import of ``agentcanvas`` in ``source`` that is not a public name, as text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name) and not _within(alias.name, libraries):
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            module = node.module or ""
            if _within(module, libraries):
                continue
            public = PUBLIC_MODULES.get(module)
            for alias in node.names:
                if public is None or alias.name not in public.__all__:
                    found.append(f"from {module} import {alias.name}")
    return found


def _ours(module: str) -> bool:
    return module == "agentcanvas" or module.startswith("agentcanvas.")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_every_public_name_resolves() -> None:
    names = agentcanvas.nodes.__all__
    assert names == sorted(names)
    missing = [name for name in names if not hasattr(agentcanvas.nodes, name)]
    assert not missing
    for name in ("NodeSet", "CallContext", "PortSpec", "Panel", "FieldSpec", "save_frame"):
        assert name in names


@pytest.mark.parametrize(
    "path", sorted(NODESETS.rglob("*.py")), ids=lambda p: str(p.relative_to(NODESETS))
)
def test_a_builtin_node_set_imports_only_public_names(path: Path) -> None:
    assert non_public_imports(path.read_text("utf-8"), BUILTIN_LIBRARIES) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_examples_import_only_public_names(doc: Path) -> None:
    for block in PYTHON_BLOCK.finditer(doc.read_text("utf-8")):
        assert non_public_imports(block["body"]) == [], block["body"]


def test_the_docs_show_the_node_api() -> None:
    blocks = "".join(m["body"] for d in DOCS for m in PYTHON_BLOCK.finditer(d.read_text("utf-8")))
    assert "from agentcanvas.nodes import" in blocks


def test_an_internal_import_is_caught() -> None:
    source = (
        "from agentcanvas.nodes import NodeSet\n"
        "from agentcanvas.nodes.base import Panel\n"
        "from agentcanvas.nodes import RemoteThing\n"
        "def f():\n"
        "    import agentcanvas.server.fleet\n"
        "from agentcanvas.gridnav import find_cells\n"
    )
    assert sorted(non_public_imports(source)) == [
        "from agentcanvas.gridnav import find_cells",
        "from agentcanvas.nodes import RemoteThing",
        "from agentcanvas.nodes.base import Panel",
        "import agentcanvas.server.fleet",
    ]
    assert "import agentcanvas.server.fleet" in non_public_imports(source, BUILTIN_LIBRARIES)
