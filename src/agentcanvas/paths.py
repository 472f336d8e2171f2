"""The one helper through which a user-supplied name becomes a path (DESIGN § 8).

Every name that ends up in a filesystem path (a graph name, a run id, a node-set name, an
episode index from a URL, an asset file name) is first matched against a strict pattern of
its kind (:func:`check_name`), then joined to its base folder and resolved with realpath
before a containment check (:func:`resolve_within`). :func:`safe_child` does both. Symlinks
that lead out of the base are refused, whatever the name looks like.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from agentcanvas.errors import UnsafeNameError

__all__ = [
    "NAME_PATTERNS",
    "check_name",
    "contained",
    "resolve_within",
    "runs_dir",
    "safe_child",
    "workspace_dir",
]

NAME_PATTERNS: Final[dict[str, str]] = {
    # Graph names: file stems under graphs/; ".." is refused separately (see _EXTRA_RULES).
    "graph": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    # Run ids: second-precision timestamp with an optional collision suffix.
    "run_id": r"^[0-9]{8}_[0-9]{6}(_[0-9]+)?$",
    # Node-set names: Python-identifier-like, lower case (they name packages and folders).
    "nodeset": r"^[a-z][a-z0-9_]{0,47}$",
    # Episode indices as they arrive in a URL or on the command line (decimal, no sign).
    "episode": r"^[0-9]{1,9}$",
    # File names inside an episode's assets/ folder.
    "asset": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
}

_EXTRA_RULES: Final[dict[str, tuple[str, str]]] = {
    # kind -> (forbidden substring, how the message says it)
    "graph": ("..", "and must not contain '..'"),
    "asset": ("..", "and must not contain '..'"),
}

# re.ASCII keeps the classes ASCII-only; fullmatch (not match) so "$" cannot accept a
# trailing newline.
_COMPILED: Final[dict[str, re.Pattern[str]]] = {
    kind: re.compile(pattern, re.ASCII) for kind, pattern in NAME_PATTERNS.items()
}


def _rule_text(kind: str) -> str:
    extra = _EXTRA_RULES.get(kind)
    return NAME_PATTERNS[kind] + (f" {extra[1]}" if extra else "")


def check_name(kind: str, name: object, *, field: str | None = None) -> str:
    """Return ``name`` unchanged if it is a valid name of ``kind``, else raise UnsafeNameError.

    ``field`` names the input field in the message (defaults to ``kind``), e.g.
    ``check_name("graph", body.graph_name, field="graph_name")``.
    """
    if kind not in _COMPILED:
        raise ValueError(f"unknown name kind {kind!r}; known: {sorted(_COMPILED)}")
    label = field or kind
    if not isinstance(name, str):
        raise UnsafeNameError(
            f"{label}: expected a string, got {type(name).__name__} ({name!r}); "
            f"a {kind} name must match {_rule_text(kind)}"
        )
    extra = _EXTRA_RULES.get(kind)
    if _COMPILED[kind].fullmatch(name) is None or (extra is not None and extra[0] in name):
        raise UnsafeNameError(
            f"{label}: {name!r} is not an allowed {kind} name; it must match {_rule_text(kind)}"
        )
    return name


def resolve_within(base: Path, *parts: str) -> Path:
    """Join ``parts`` to ``base``, realpath the result and return it if strictly inside base.

    Both ``base`` and the result are resolved with symlinks followed, so a symlink inside
    ``base`` that points outside it is refused. The base folder itself is not a valid result
    (``"."`` or ``"sub/.."`` would otherwise name the whole folder).
    """
    try:
        base_real = Path(os.path.realpath(base))
        target = Path(os.path.realpath(base_real.joinpath(*parts)))
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        raise UnsafeNameError(f"path {parts!r} under {str(base)!r} cannot be resolved") from exc
    if target == base_real or not target.is_relative_to(base_real):
        raise UnsafeNameError(
            f"path {'/'.join(parts)!r} resolves to {str(target)!r}, "
            f"which is not inside {str(base_real)!r}"
        )
    return target


def contained(base: Path, path: Path, *, field: str = "path") -> Path:
    """``path`` (written under ``base``) resolved with realpath; refused unless inside base.

    The check every served file goes through: a symlink anywhere on the way (an episode
    folder, its assets folder, the file itself) that leads out of ``base`` is refused.
    """
    relative = path.relative_to(base)
    try:
        base_real = Path(os.path.realpath(base))
        target = Path(os.path.realpath(base_real / relative))
    except (OSError, ValueError) as exc:
        raise UnsafeNameError(f"{field}: {str(relative)!r} cannot be resolved") from exc
    if target == base_real or not target.is_relative_to(base_real):
        raise UnsafeNameError(
            f"{field}: {str(relative)!r} is a link to a path not inside {base.name!r}; refused"
        )
    return target


def safe_child(base: Path, kind: str, name: str, *, field: str | None = None) -> Path:
    """Check ``name`` against the pattern of ``kind``, then resolve it inside ``base``."""
    return resolve_within(base, check_name(kind, name, field=field))


def workspace_dir() -> Path:
    """The workspace folder: ``$AGENTCANVAS_HOME`` when set and non-empty, else the cwd."""
    home = os.environ.get("AGENTCANVAS_HOME", "")
    return Path(home).expanduser().resolve() if home else Path.cwd()


def runs_dir(workspace: Path | None = None) -> Path:
    """The folder holding one sub-folder per run: ``<workspace>/outputs/eval_runs``."""
    return (workspace if workspace is not None else workspace_dir()) / "outputs" / "eval_runs"
