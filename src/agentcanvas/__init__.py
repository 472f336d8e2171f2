"""AgentCanvas Batch Eval: run an agent graph over many episodes, identically at any N."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcanvas.export import episodes_df, runs_df

__version__ = "0.1.0"
__all__ = ["__version__", "episodes_df", "runs_df"]

_LAZY = {"runs_df", "episodes_df"}


def __getattr__(name: str) -> Any:
    """``agentcanvas.runs_df`` / ``episodes_df``, imported on first use (keeps import cheap)."""
    if name in _LAZY:
        from agentcanvas import export

        return getattr(export, name)
    raise AttributeError(f"module 'agentcanvas' has no attribute {name!r}")
