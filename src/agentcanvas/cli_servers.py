"""``agentcanvas serve-nodeset`` and running-server listing (being written)."""

from __future__ import annotations

from typing import Any


def extend_parser(sub: Any) -> None:
    """Registers the server sub-commands."""
