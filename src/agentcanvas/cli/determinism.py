"""The determinism block of a run for the terminal: a table (``agentcanvas eval``'s summary)
and one plain-words sentence (``determinism_line``).

Nothing here says "guaranteed" or "independent of the worker count" unless the level is
``certified``: a sample, however clean, does not prove it (rule 7 of the determinism rules).
"""

from __future__ import annotations

from rich.table import Table

from agentcanvas.eval.config import DeterminismInfo

__all__ = ["determinism_line", "determinism_table"]

_VERDICT = {
    "certified": "certified",
    "sampled": "sampled (not proven)",
    "unverified": "unverified",
    "broken": "BROKEN",
}
_STYLE = {"certified": "green", "sampled": "yellow", "unverified": "yellow", "broken": "red"}


def determinism_line(info: DeterminismInfo) -> str:
    """One sentence for the CLI: the run's level and what it rests on (plain text, no markup)."""
    level = info.level
    why = info.level_detail or "no detail recorded"
    if level == "certified":
        return (
            f"determinism: certified — results are independent of the worker count: {why}"
            if info.batched_functions
            else f"determinism: certified — {why}"
        )
    if level == "sampled":
        return (
            f"determinism: sampled — {why}. A sample does not prove that results are "
            "independent of the worker count; rerun with --certify"
        )
    if level == "unverified":
        return (
            f"determinism: unverified — {why}. Nothing shows that results are independent of "
            "the worker count" + ("; rerun with --certify" if not info.timeouts else "")
        )
    return (
        f"determinism: BROKEN — {why}. Results may differ between worker counts from the "
        "episode named on; rerun with -w 1 or --certify"
    )


def determinism_table(info: DeterminismInfo) -> Table:
    """Each batched function the run used: level, mode, verification, audit, mismatch."""
    style = _STYLE.get(info.level, "yellow")
    table = Table(title=f"determinism: [{style}]{_VERDICT.get(info.level, info.level)}")
    columns = ("batched function", "level", "mode", "verified by", "audited", "batched")
    for column in (*columns, "mismatch"):
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
        audited = f"{entry.run_batches_audited} of {entry.run_batches}"
        if entry.audit_rate == 0:
            audited += " (audit off)"
        if entry.rows_alone:
            audited += f", {entry.rows_alone} rows alone"
        table.add_row(
            name,
            f"[{_STYLE.get(entry.level, 'yellow')}]{entry.level}",
            entry.mode if entry.verified else f"[yellow]{entry.mode}",
            entry.verified_by,
            audited,
            str(entry.batched_requests),
            mismatch,
        )
    if not info.batched_functions:
        table.add_row("(none)", "-", "-", "-", "-", "-", "-")
    return table
