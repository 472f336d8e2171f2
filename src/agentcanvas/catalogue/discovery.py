"""Finding node sets and graphs on disk: built-ins, the workspace, and an active overlay."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentcanvas.errors import NodeSetError
from agentcanvas.nodes.base import NodeSet

__all__ = [
    "GRAPH_FILE",
    "NODESET_NAME",
    "Found",
    "Origin",
    "builtin_graphs",
    "builtin_nodesets",
    "find_nodeset",
    "folder_graphs",
    "folder_nodesets",
    "import_nodeset",
]

Origin = Literal["builtin", "workspace", "active"]
NODESET_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
GRAPH_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.json$")


@dataclass(frozen=True)
class Found:
    """A discovered item: its name, where it came from, and its path."""

    name: str
    origin: Origin
    path: Path


def builtin_nodesets() -> dict[str, Found]:
    root = _package_dir("agentcanvas.nodesets")
    found: dict[str, Found] = {}
    for info in pkgutil.iter_modules([str(root)]):
        if info.ispkg and NODESET_NAME.match(info.name):
            found[info.name] = Found(info.name, "builtin", root / info.name)
    return found


def folder_nodesets(folder: Path, origin: Origin) -> dict[str, Found]:
    """Node sets under ``folder``: each a sub-folder with an ``__init__.py`` defining NODESET."""
    found: dict[str, Found] = {}
    if not folder.is_dir():
        return found
    for child in sorted(folder.iterdir()):
        if child.is_dir() and NODESET_NAME.match(child.name) and (child / "__init__.py").exists():
            found[child.name] = Found(child.name, origin, child)
    return found


def find_nodeset(name: str, folders: list[tuple[Path, Origin]]) -> Found | None:
    """Where the node set ``name`` is, looking only for it: in the first of ``folders``
    (``graph_nodes`` folders, the one that wins first) that holds it, else the built-ins;
    None when nowhere. Nothing is listed or imported besides."""
    if not NODESET_NAME.match(name):
        return None
    for folder, origin in folders:
        path = folder / name
        if (path / "__init__.py").is_file():
            return Found(name, origin, path)
    path = _package_dir("agentcanvas.nodesets") / name
    return Found(name, "builtin", path) if (path / "__init__.py").is_file() else None


def import_nodeset(found: Found) -> NodeSet:
    """Import a node set's module and return its NODESET declaration."""
    if found.origin == "builtin":
        module = importlib.import_module(f"agentcanvas.nodesets.{found.name}")
    else:
        module_name = f"agentcanvas_user_nodes_{found.origin}.{found.name}"
        spec = importlib.util.spec_from_file_location(
            module_name, found.path / "__init__.py", submodule_search_locations=[str(found.path)]
        )
        if spec is None or spec.loader is None:
            raise NodeSetError(f"node set {found.name!r}: cannot import {found.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # a user's sys.exit() at import: its error
            del sys.modules[module_name]
            raise NodeSetError(
                f"node set {found.name!r} at {found.path} failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    nodeset = getattr(module, "NODESET", None)
    if not isinstance(nodeset, NodeSet):
        raise NodeSetError(f"node set {found.name!r} at {found.path}: no NODESET = NodeSet(...)")
    if nodeset.name != found.name:
        raise NodeSetError(
            f"node set folder {found.name!r} declares NodeSet name {nodeset.name!r}; "
            "they must match"
        )
    return nodeset


def builtin_graphs() -> dict[str, Found]:
    return folder_graphs(_package_dir("agentcanvas.graphs"), "builtin")


def _package_dir(package: str) -> Path:
    """The folder of a package of ours, found without importing it (node sets sit above
    the catalogue: it imports them one by one, by name)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise NodeSetError(f"package {package} is missing from this installation")
    return Path(next(iter(spec.submodule_search_locations)))


def folder_graphs(folder: Path, origin: Origin) -> dict[str, Found]:
    found: dict[str, Found] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        if GRAPH_FILE.match(path.name):
            found[path.stem] = Found(path.stem, origin, path)
    return found
