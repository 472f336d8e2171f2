"""The determinism block of a run as a terminal table (``agentcanvas eval``'s summary)."""

from __future__ import annotations

from rich.table import Table

from agentcanvas.eval.config import DeterminismInfo


def determinism_table(info: DeterminismInfo) -> Table:
    """Each batched function the run used: mode, verification, audit, mismatch."""
    verdict = "guaranteed" if info.guaranteed else "NOT guaranteed"
    table = Table(title=f"determinism: {verdict} (results independent of the worker count)")
    for column in ("batched function", "mode", "verified by", "audited", "batched", "mismatch"):
        table.add_column(column)
    for name, entry in sorted(info.batched_functions.items()):
        mismatch = "-"
        if entry.mismatch is not None:
            first = entry.first_episode_affected
            mismatch = entry.mismatch + (
                f" (first episode affected: {first})"
                if first is not None
                else " (no episode of this run batched)"
            )
        table.add_row(
            name,
            entry.mode if entry.verified else f"[yellow]{entry.mode}",
            entry.verified_by,
            str(entry.batches_audited),
            str(entry.batched_requests),
            mismatch,
        )
    if not info.batched_functions:
        table.add_row("(none)", "-", "-", "-", "-", "-")
    return table
