"""RunControl: what a run's workers share with it, and the seam where its episodes run.

The runner (``eval.runner.BatchEvalRunner``) plans the run and decides its final status; its
:class:`EpisodeWorkers` run the episodes — on this host's worker slots
(``eval.local_workers.LocalEpisodeWorkers``) or in Ray actors
(``cluster.runner.RayEpisodeWorkers``). Both take indices from the dispatcher, run each
episode with its planned seed, spend the run's error budget and hand every result to the
run's :class:`~agentcanvas.eval.recorder.RunRecorder` through this control; both stop taking
episodes once it is cancelled (by the user, a stop rule, the error budget or a full disk).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from agentcanvas.eval import health, metrics
from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.episode import CancelEvent, EpisodeSpec, mark_cancelled
from agentcanvas.eval.episode_log import EpisodeFiles
from agentcanvas.eval.recorder import RunRecorder
from agentcanvas.eval.run_context import RunContext

__all__ = ["RETRYABLE_STATUSES", "EpisodeWorkers", "RunControl"]

RETRYABLE_STATUSES: Final = ("error", "exception", "timeout")
"""Endings a lost server or worker may have caused: retried when one was lost."""


class EpisodeWorkers(Protocol):
    """Where a run's episodes run: this host's worker slots, or Ray actors."""

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        """Run every episode ``dispatcher`` hands out (until ``control`` is cancelled),
        recording each through ``control``; a failure that ends the run raises."""


class RunControl:
    """The run's plan, its recorder, its cancel flag and its error budget, for its workers."""

    def __init__(
        self, context: RunContext, specs: Sequence[EpisodeSpec], rules: metrics.MetricRules
    ) -> None:
        self.context = context
        self.specs = list(specs)
        self.cancel_event = CancelEvent()
        self.aborted = False  # cancelled because the run cannot go on here: resumable
        self.stop_reason: str | None = None  # set when the error budget (max_errors) is spent
        self._errors = sum(r.status in health.ERROR_STATUSES for r in context.previous)
        self.recorder = RunRecorder(context, self.specs, rules, self.cancel)

    @property
    def config(self) -> EvalConfig:
        return self.context.config

    @property
    def cancelled(self) -> bool:
        """Whether the run stops: no episode may start any more."""
        return self.cancel_event.is_set()

    def cancel(self, aborted: bool = False) -> None:
        """Stop after the episodes in flight; ``aborted`` when the run cannot go on here (its
        parent died, the disk is full): it ends resumable."""
        self.aborted = self.aborted or aborted
        self.cancel_event.set()

    def spend(self, result: EpisodeResult) -> None:
        """Count an error episode against ``max_errors``; past it the run stops (status
        ``failed``). Called when the episode ends, before its files are written: past the
        budget no further episode may start while recordings are still in flight."""
        self._errors += result.status in health.ERROR_STATUSES
        total = len(self.specs)
        reason = health.error_budget_exceeded(self.config.max_errors, self._errors, total)
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
            self.cancel_event.set()  # episodes in flight end as cancelled

    def settle_cancelled(self, result: EpisodeResult) -> None:
        """An episode that failed while the run was being cancelled failed for the cancel:
        it is recorded ``cancelled`` (and runs again on resume)."""
        if self.cancelled and result.status in RETRYABLE_STATUSES:
            mark_cancelled(result)

    async def record(self, result: EpisodeResult, files: EpisodeFiles | None = None) -> None:
        """Persist ``result`` with its own ``files`` (the recorder's one thread hop)."""
        await self.recorder.record(result, files)
