"""Stop rules: a run that ends when its answer is known, after the same episodes at any W.

A rule looks only at the **plan-order prefix** of finished episodes: the plan's episodes
ordered by episode index, tasks interleaved (episode 0 of every task, then episode 1, ...),
and of those the longest run from the start with no episode still missing. Episodes finish in
any order on N workers, but that prefix is the same sequence at every worker count, and so is
the point where a rule decides on it. A run with a rule hands its episodes out in that order
(``dispatch.InOrderDispatcher``) so the prefix keeps up with the work; an episode that
finishes past the decision (it was in flight) is kept apart, out of the run's records.

- ``until_halfwidth H``: the beta-binomial confidence sequence of the overall success rate
  (all tasks pooled; scored episodes) is at most ±H wide (``sequential.beta_binomial_cs``);
- ``until_decided_vs RUN``: the anytime-valid McNemar (``sequential.paired_sequential_test``)
  on the pairs (this run, the baseline) of the same (task, episode index), errors counting as
  failures for both: "B better" or "B worse" at ``stop_alpha``; "not distinguishable" at the
  cap or where the baseline has no paired episode left.

Both are valid however often they are checked (Ville's inequality), which is what checking
after every episode needs; the type-I error and coverage are measured by simulation in
``tests/eval/test_sequential.py`` and by real runs in ``tests/integration/test_stop_rules.py``.
The live view's interval (`PrefixWatcher.live`) is the same sequence, for any run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from agentcanvas.errors import ConfigError, RunNotFoundError
from agentcanvas.eval.config import EpisodeResult, EvalConfig, LiveInterval, StopReport
from agentcanvas.eval.paired_sequential import paired_sequential_test
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.sequential import SEQUENTIAL_METHOD_NAMES, beta_binomial_cs
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import make_dirs

__all__ = [
    "KEPT_APART_FOLDER",
    "PairKey",
    "PrefixWatcher",
    "check_baseline_tasks",
    "decision_order",
    "keep_apart",
    "load_baseline",
    "outcome",
]

KEPT_APART_FOLDER: Final = "past_stop"
PairKey = tuple[str, int]


class _Spec(Protocol):
    """What the watcher needs of an EpisodeSpec (index, task, episode_index)."""

    @property
    def index(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def episode_index(self) -> int: ...


def decision_order(specs: Sequence[_Spec]) -> list[int]:
    """The plan's indices by episode index, tasks interleaved in their plan order."""
    task_rank: dict[str, int] = {}
    for spec in specs:
        task_rank.setdefault(spec.task, len(task_rank))
    ordered = sorted(specs, key=lambda s: (s.episode_index, task_rank[s.task], s.index))
    return [s.index for s in ordered]


def keep_apart(run_dir: RunDir, index: int) -> None:
    """Move episode ``index``'s folder (if any) to ``past_stop/``: it finished past a
    decision, so it is not one of the run's records."""
    source = run_dir.episode_dir(index)
    target = run_dir.root / KEPT_APART_FOLDER / source.name
    make_dirs(target.parent)
    if target.exists():
        shutil.rmtree(target)
    if source.exists():
        os.replace(source, target)


def outcome(result: EpisodeResult) -> bool | None:
    """Success (True/False) of a scored episode; None when it was not scored."""
    value = result.metrics.get("success") if result.status == "completed" else None
    if value is None or isinstance(value, str):
        return None
    return float(value) >= 0.5


def _as_failure(result: EpisodeResult) -> bool:
    """For a paired decision: success when scored a success; anything else is a failure."""
    return outcome(result) is True


def load_baseline(runs_dir: Path, config: EvalConfig) -> dict[PairKey, bool]:
    """The baseline's outcome by (task, episode index), errors as failures; an error naming
    ``until_decided_vs`` when it is missing (RunNotFoundError), was run with another seed or
    has no record (ConfigError)."""
    run_id = config.until_decided_vs
    if run_id is None:
        return {}
    run_dir = RunDir(runs_dir / run_id)
    spec_path = run_dir.spec_path
    if not spec_path.is_file():
        raise RunNotFoundError(f"until_decided_vs: no run {run_id!r} in {str(runs_dir)!r}")
    baseline = RunSpec.read(run_dir).config
    if baseline.seed != config.seed:
        raise ConfigError(
            f"until_decided_vs: run {run_id} used seed {baseline.seed}, this run {config.seed}: "
            "paired episodes need the same seed (give --seed "
            f"{baseline.seed})"
        )
    results = [r for r in recorded_results(run_dir) if r.status != "cancelled"]
    if not results:
        raise ConfigError(f"until_decided_vs: run {run_id} has no recorded episode")
    return {(r.task, r.episode_index): _as_failure(r) for r in results}


def check_baseline_tasks(
    baseline: Mapping[PairKey, bool], tasks: Sequence[str], run_id: str
) -> None:
    """ConfigError naming ``until_decided_vs`` when the baseline has no episode of a task of
    this run: a paired test needs the same episodes (give --tasks with the common ones)."""
    theirs = {task for task, _ in baseline}
    missing = [t for t in tasks if t not in theirs]
    if missing:
        raise ConfigError(
            f"until_decided_vs: run {run_id} has no episode of task(s) {', '.join(missing)} "
            f"(it has {', '.join(sorted(theirs))}); pair only common tasks with --tasks"
        )


class PrefixWatcher:
    """Follows the plan-order prefix of finished episodes; decides the run's stop rule."""

    def __init__(
        self,
        specs: Sequence[_Spec],
        config: EvalConfig,
        baseline: Mapping[PairKey, bool] | None = None,
    ) -> None:
        self.config = config
        self.order = decision_order(specs)
        self.position = {index: pos for pos, index in enumerate(self.order)}
        self._keys = {s.index: (s.task, s.episode_index) for s in specs}
        self.baseline = dict(baseline or {})
        if config.until_decided_vs is not None:
            tasks = list(dict.fromkeys(s.task for s in specs))
            check_baseline_tasks(self.baseline, tasks, config.until_decided_vs)
        self.halfwidth_rule = config.until_halfwidth is not None
        self.paired_rule = config.until_decided_vs is not None
        # Both given: the first to decide stops the run (its report says which).
        self.rule = (
            "until_decided_vs"
            if self.paired_rule
            else "until_halfwidth"
            if self.halfwidth_rule
            else None
        )
        self._pending: dict[int, EpisodeResult] = {}
        self.prefix = 0
        self.k = self.n = 0  # scored successes / scored episodes of the prefix
        self.b_wins = self.a_wins = 0
        self.report: StopReport | None = None
        self.kept_apart = 0

    @property
    def decided(self) -> bool:
        return self.report is not None and self.report.decided

    def past_stop(self, index: int) -> bool:
        """Whether episode ``index`` lies past the decision (kept out of the records)."""
        return self.decided and self.position[index] >= self.prefix

    def observe(self, result: EpisodeResult) -> StopReport | None:
        """Note a finished episode; the rule's decision when it is taken now."""
        if self.decided or result.status == "cancelled" or result.index not in self.position:
            return None
        self._pending[result.index] = result
        while self.prefix < len(self.order) and self.order[self.prefix] in self._pending:
            episode = self._pending.pop(self.order[self.prefix])
            self.prefix += 1
            if self._step(episode):
                return self.report
        return None

    def _step(self, episode: EpisodeResult) -> bool:
        key = self._keys[episode.index]
        if self.paired_rule and key not in self.baseline:
            self.prefix -= 1  # this episode has no pair: the decision rests on those before
            note = f"the baseline has no episode {key[1]} of task {key[0]}: its pairs ran out"
            self.report = self._paired_report("not distinguishable", decided=True, note=note)
            return True
        scored = outcome(episode)
        if scored is not None:
            self.n += 1
            self.k += scored
        if self.halfwidth_rule and self._check_halfwidth():
            return True
        return self.paired_rule and self._check_paired(episode)

    def _check_halfwidth(self) -> bool:
        target = self.config.until_halfwidth
        assert target is not None
        if self.n == 0:
            return False
        lo, hi = beta_binomial_cs(self.k, self.n, 1 - self.config.stop_alpha)
        if (hi - lo) / 2 > target:
            return False
        self.report = self._report(
            "until_halfwidth", "narrow enough", decided=True, halfwidth=(hi - lo) / 2
        )
        return True

    def _check_paired(self, episode: EpisodeResult) -> bool:
        key = self._keys[episode.index]
        ours, theirs = _as_failure(episode), self.baseline[key]
        if ours == theirs:
            return False
        self.b_wins += ours
        self.a_wins += theirs
        test = paired_sequential_test(self.b_wins, self.a_wins, self.config.stop_alpha)
        if test.decision not in ("B better", "B worse"):
            return False
        self.report = self._paired_report(test.decision, decided=True)
        return True

    def _paired_report(self, decision: str, decided: bool, note: str = "") -> StopReport:
        test = paired_sequential_test(self.b_wins, self.a_wins, self.config.stop_alpha)
        return self._report(
            "until_decided_vs",
            decision,
            decided=decided,
            evidence=test.evidence,
            threshold=test.threshold,
            b_wins=self.b_wins,
            a_wins=self.a_wins,
            note=note,
        )

    def _report(self, rule: str, decision: str, decided: bool, **fields: object) -> StopReport:
        target = (
            f"±{self.config.until_halfwidth:g} (overall success rate, all tasks pooled)"
            if rule == "until_halfwidth"
            else f"baseline run {self.config.until_decided_vs}"
        )
        method = "beta-binomial-cs" if rule == "until_halfwidth" else "paired-sequential"
        return StopReport(
            rule=rule,
            target=target,
            alpha=self.config.stop_alpha,
            method=SEQUENTIAL_METHOD_NAMES[method],
            decision=decision,
            decided=decided,
            episodes_used=self.prefix,
            episodes_planned=len(self.order),
            **fields,  # type: ignore[arg-type]
        )

    def final(self) -> StopReport | None:
        """The rule's verdict at the end of a run it did not stop (None without a rule)."""
        if self.rule is None:
            return None
        if self.report is not None:
            return self.report.model_copy(update={"kept_apart": self.kept_apart})
        if self.paired_rule:
            return self._paired_report("not distinguishable", decided=False, note="at the cap")
        lo, hi = (0.0, 1.0)
        if self.n:
            lo, hi = beta_binomial_cs(self.k, self.n, 1 - self.config.stop_alpha)
        return self._report(
            "until_halfwidth", "not narrow enough at the cap", False, halfwidth=(hi - lo) / 2
        )

    def live(self) -> LiveInterval | None:
        """The success rate's confidence sequence on the prefix (None before a scored one)."""
        if self.n == 0:
            return None
        confidence = 1 - self.config.stop_alpha
        lo, hi = beta_binomial_cs(self.k, self.n, confidence)
        return LiveInterval(
            lo=lo,
            hi=hi,
            k=self.k,
            n=self.n,
            prefix=self.prefix,
            confidence=confidence,
            method=SEQUENTIAL_METHOD_NAMES["beta-binomial-cs"],
        )
