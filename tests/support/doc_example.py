"""The worked example of ``docs/nodesets.md`` (the ``line_world`` node set and the
``line_walk`` graph), extracted from the page itself, so the documentation's example is known
to run."""

from __future__ import annotations

import re
from pathlib import Path

from support.workspace import write_files

DOC = Path(__file__).resolve().parents[2] / "docs" / "nodesets.md"
DOC_FILE = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.S)
EXAMPLE_FILES = {"graph_nodes/line_world/__init__.py", "graphs/line_walk.json"}


def doc_example_files() -> dict[str, str]:
    """The files of the worked example, by workspace-relative path."""
    files = {m["path"]: m["body"] + "\n" for m in DOC_FILE.finditer(DOC.read_text("utf-8"))}
    assert set(files) == EXAMPLE_FILES, sorted(files)
    return files


def write_doc_example(root: Path) -> Path:
    """A workspace at ``root`` holding the worked example; ``root``."""
    return write_files(root, doc_example_files())
