"""Tests for agentcanvas.paths: name patterns and realpath containment (DESIGN § 8)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentcanvas.errors import UnsafeNameError, UserInputError
from agentcanvas.paths import (
    NAME_PATTERNS,
    check_name,
    resolve_within,
    runs_dir,
    safe_child,
    workspace_dir,
)

GOOD = {
    "graph": ["a", "minigrid_demo", "Graph-1.v2", "0" * 64, "x.json"],
    "run_id": ["20260616_143052", "20260616_143052_1", "20260616_143052_12"],
    "nodeset": ["core", "env_minigrid", "a" * 48],
    "episode": ["0", "12", "999999999"],
    "asset": ["frame_0001.png", "a.b-c_d"],
}

BAD_GRAPH = [
    "../x",
    "..",
    ".",
    "a..b",
    "/etc",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "",
    "a" * 65,
    ".hidden",
    "-flag",
    "name\n",
    "a\x00b",
    "a b",
    "\uff41bc",  # FULLWIDTH LATIN SMALL LETTER A
    "gr\u0430ph",  # CYRILLIC SMALL LETTER A, looks like "graph"
    "a\u2024json",  # ONE DOT LEADER, looks like "a.json"
    "\u2025x",  # TWO DOT LEADER, looks like "..x"
    "\uff10",  # FULLWIDTH DIGIT ZERO
]


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, names in GOOD.items() for n in names])
def test_check_name_accepts_valid_names(kind: str, name: str) -> None:
    assert check_name(kind, name) == name


@pytest.mark.parametrize("name", BAD_GRAPH)
def test_check_name_refuses_unsafe_graph_names_naming_kind_value_and_pattern(name: str) -> None:
    with pytest.raises(UnsafeNameError) as info:
        check_name("graph", name)
    message = str(info.value)
    assert "graph" in message
    assert repr(name) in message
    assert NAME_PATTERNS["graph"] in message
    assert isinstance(info.value, UserInputError)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("run_id", "20260616_14305"),
        ("run_id", "20260616_143052_"),
        ("run_id", "20260616_143052_a"),
        ("run_id", "../20260616_143052"),
        ("run_id", "\uff12" + "0260616_143052"),  # fullwidth digit two
        ("run_id", "20260616_143052\n"),
        ("nodeset", "Core"),
        ("nodeset", "1core"),
        ("nodeset", "core-x"),
        ("nodeset", "a" * 49),
        ("nodeset", "env_x#0"),
        ("episode", "-1"),
        ("episode", "1.0"),
        ("episode", "\u0661"),  # ARABIC-INDIC DIGIT ONE
        ("episode", "1" * 10),
        ("asset", "../log.jsonl"),
        ("asset", "a..png"),
    ],
)
def test_check_name_refuses_bad_names_of_other_kinds(kind: str, name: str) -> None:
    with pytest.raises(UnsafeNameError, match=kind):
        check_name(kind, name)


def test_check_name_uses_the_field_name_when_given() -> None:
    with pytest.raises(UnsafeNameError, match=r"^graph_name: '\.\./x' is not an allowed graph"):
        check_name("graph", "../x", field="graph_name")


@pytest.mark.parametrize("value", [None, 3, b"abc", ["a"]])
def test_check_name_refuses_non_strings(value: object) -> None:
    with pytest.raises(UnsafeNameError, match="expected a string"):
        check_name("graph", value)


def test_check_name_rejects_an_unknown_kind_as_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown name kind"):
        check_name("no_such_kind", "a")


def test_resolve_within_returns_the_realpath_inside_base(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert resolve_within(tmp_path, "sub", "x.json") == tmp_path.resolve() / "sub" / "x.json"
    # A name that does not exist yet is fine: realpath is not strict.
    assert resolve_within(tmp_path, "new") == tmp_path.resolve() / "new"


@pytest.mark.parametrize(
    "parts",
    [("..",), ("../x",), ("sub", "..", "..", "x"), ("/etc",), ("/etc/passwd",), ("",), (".",)],
)
def test_resolve_within_refuses_escapes_and_the_base_itself(
    tmp_path: Path, parts: tuple[str, ...]
) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(UnsafeNameError, match="not inside"):
        resolve_within(tmp_path, *parts)


def test_resolve_within_refuses_a_symlink_pointing_outside(tmp_path: Path) -> None:
    base, outside = tmp_path / "base", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    (base / "evil.json").symlink_to(outside / "secret.json")
    (base / "evil_dir").symlink_to(outside)
    with pytest.raises(UnsafeNameError, match="not inside"):
        resolve_within(base, "evil.json")
    with pytest.raises(UnsafeNameError, match="not inside"):
        resolve_within(base, "evil_dir", "secret.json")
    # The name passes the pattern; only the containment check can catch this one.
    with pytest.raises(UnsafeNameError, match="not inside"):
        safe_child(base, "graph", "evil.json")


def test_resolve_within_allows_a_symlink_that_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert resolve_within(tmp_path, "alias", "f") == tmp_path.resolve() / "real" / "f"


def test_resolve_within_accepts_a_base_that_is_itself_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert resolve_within(tmp_path / "link", "f") == tmp_path.resolve() / "real" / "f"


def test_resolve_within_refuses_nul_bytes_and_contains_symlink_loops(tmp_path: Path) -> None:
    with pytest.raises(UnsafeNameError):
        resolve_within(tmp_path, "a\x00b")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    # realpath leaves a loop unresolved rather than failing; what matters is that it stays
    # inside the base (opening it then fails with ELOOP, nothing escapes).
    try:
        resolved = resolve_within(tmp_path, "loop", "x")
    except UnsafeNameError:
        return
    assert resolved.is_relative_to(tmp_path.resolve())


def test_safe_child_checks_the_pattern_before_touching_the_filesystem(tmp_path: Path) -> None:
    assert safe_child(tmp_path, "run_id", "20260616_143052") == (
        tmp_path.resolve() / "20260616_143052"
    )
    with pytest.raises(UnsafeNameError, match=r"^run_id: '\.\./x'"):
        safe_child(tmp_path, "run_id", "../x")
    with pytest.raises(UnsafeNameError, match=r"^graph_name:"):
        safe_child(tmp_path, "graph", "a/b", field="graph_name")


def test_workspace_dir_prefers_agentcanvas_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCANVAS_HOME", str(tmp_path))
    assert workspace_dir() == tmp_path.resolve()
    assert runs_dir() == tmp_path.resolve() / "outputs" / "eval_runs"


def test_workspace_dir_falls_back_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCANVAS_HOME", "")
    monkeypatch.chdir(tmp_path)
    assert workspace_dir() == Path(os.getcwd())
    assert runs_dir(tmp_path / "ws") == tmp_path / "ws" / "outputs" / "eval_runs"
