"""The determinism levels (certified / sampled / unverified / broken), case by case.

Pure: a function's level from what its server reported for the run (``function_level``,
through ``_entry`` as the run reads a ``/batch_audit`` report), the run's level
(``DeterminismInfo.settle``: the worst, capped by wall-clock timeouts), older summaries that
had only ``guaranteed``, and the CLI's sentence.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentcanvas.cli.determinism import determinism_line, determinism_table
from agentcanvas.eval.config import BatchedFunctionInfo, DeterminismInfo, EvalRun
from agentcanvas.eval.determinism import AUDIT_OFF, _entry, function_level, ruled_out_above

PASSED = "start-up check passed: 108 rows, batch sizes 1-8, every position, 3 example(s)"
NO_CHECK = "no start-up check (the function declares no example inputs)"


def report(
    *,
    verified: bool = True,
    rate: float = 1 / 16,
    mismatch: dict[str, str] | None = None,
    **run: Any,
) -> dict[str, Any]:
    """A server's ``/batch_audit`` for one function ``f`` and one run."""
    use = {
        "batched_requests": 0,
        "first_batched_episode": None,
        "audited_batches": 0,
        "batches": 0,
        "rows_alone": 0,
        "certify": False,
        **run,
    }
    return {
        "audit_rate": rate,
        "audit_seed": 0,
        "functions": {
            "f": {
                "batch_mode": "batched",
                "mode": "per_request" if mismatch else "batched",
                "verified": verified and mismatch is None,
                "verified_by": PASSED if verified else NO_CHECK,
                "batches": use["batches"],
                "batches_audited": use["audited_batches"],
                "mismatch": mismatch,
                "run": use,
            }
        },
    }


AUDIT_MISMATCH = {"found_by": "audit", "detail": "position 1 of a batch of 4: value: 1 != 2"}


def entry(final: bool = True, **kwargs: Any) -> BatchedFunctionInfo:
    return _entry(report(**kwargs), "f", final)


# -- certified --------------------------------------------------------------------------------
def test_a_run_never_batched_is_certified_even_without_examples_or_audit() -> None:
    e = entry(verified=False, rate=0.0)  # e.g. every -w 1 run
    assert e.level == "certified" and "batch of one is alone" in e.level_detail


def test_certify_with_every_row_recomputed_alone_is_certified() -> None:
    e = entry(certify=True, rows_alone=12, batches=4, audited_batches=4)
    assert e.level == "certified" and e.certify and e.rows_alone == 12
    assert "12 rows" in e.level_detail and "matched bit for bit" in e.level_detail


def test_in_process_is_certified() -> None:
    e = _entry("in_process", "f", True)
    assert e.level == "certified" and e.mode == "in_process"


def test_before_the_end_only_a_certifying_run_is_certified() -> None:
    assert entry(final=False).level == "sampled"  # prospective: it may be batched
    assert entry(final=False, certify=True).level == "certified"
    assert entry(final=False, verified=False).level == "unverified"


# -- sampled ----------------------------------------------------------------------------------
def test_examples_and_k_clean_audits_are_sampled_and_say_what_that_rules_out() -> None:
    e = entry(batched_requests=40, batches=10, audited_batches=4)
    assert e.level == "sampled"
    assert e.ruled_out_above == pytest.approx(1 - 0.05**0.25)
    assert "4 of this run's 10 shared batches were audited (audit rate 0.0625)" in e.level_detail
    assert "rule out, at 95 % confidence, that more than 52.7% of batches" in e.level_detail
    assert "X = 1 - 0.05^(1/k)" in e.level_detail
    assert "only for inputs unlike the examples, is not ruled out" in e.level_detail
    assert "--certify" in e.level_detail


def test_audited_batches_without_examples_are_sampled_too() -> None:
    e = entry(verified=False, batched_requests=6, batches=2, audited_batches=1)
    assert e.level == "sampled" and e.ruled_out_above == pytest.approx(0.95)


def test_examples_with_the_audit_off_are_sampled_and_say_the_audit_was_off() -> None:
    e = entry(rate=0.0, batched_requests=30, batches=12)
    assert e.level == "sampled" and e.ruled_out_above is None
    assert f"none of this run's 12 shared batches was audited ({AUDIT_OFF})" in e.level_detail
    assert AUDIT_OFF == "the audit was off (AGENTCANVAS_AUDIT_RATE=0)"


def test_a_certify_that_did_not_reach_every_row_is_no_longer_certified() -> None:
    e = entry(certify=True, rows_alone=4, batched_requests=4, batches=2, audited_batches=1)
    assert e.level == "sampled"  # e.g. a restarted server forgot the run


def test_ruled_out_above_is_one_minus_alpha_to_the_one_over_k() -> None:
    assert ruled_out_above(1) == pytest.approx(0.95)
    assert ruled_out_above(60) == pytest.approx(1 - math.exp(math.log(0.05) / 60))


# -- unverified -------------------------------------------------------------------------------
def test_no_examples_and_the_audit_off_is_unverified_and_says_so() -> None:
    e = entry(verified=False, rate=0.0, batched_requests=8, batches=3)
    assert e.level == "unverified"
    assert "declares no example inputs" in e.level_detail and AUDIT_OFF in e.level_detail


def test_no_examples_and_no_audited_batch_is_unverified() -> None:
    e = entry(verified=False, batched_requests=2, batches=1)
    assert e.level == "unverified" and "none of this run's 1 shared batches" in e.level_detail


def test_an_unreadable_or_silent_server_is_unverified() -> None:
    unreadable = _entry("the server's audit could not be read (ConnectError: x)", "f", True)
    assert unreadable.level == "unverified" and "could not be read" in unreadable.level_detail
    silent = _entry({"functions": {}}, "f", True)
    assert silent.level == "unverified" and silent.mode == "unknown"
    old_server = _entry({"functions": {"f": {"mode": "batched", "verified": True}}}, "f", True)
    assert old_server.level == "unverified"  # no per-run figures: nothing to certify on


# -- broken -----------------------------------------------------------------------------------
def test_a_mismatch_is_broken_and_names_the_first_episode_affected() -> None:
    e = entry(
        mismatch={**AUDIT_MISMATCH, "episode_key": "r:7", "client": "r/w1"},
        batched_requests=9,
        batches=3,
        audited_batches=1,
        first_batched_episode=5,
    )
    assert e.level == "broken" and e.mode == "per_request" and e.first_episode_affected == 5
    assert "depend on the batch" in e.level_detail and "from episode 5 on" in e.level_detail


def test_a_mismatch_found_by_certify_affected_no_episode() -> None:
    e = entry(mismatch=AUDIT_MISMATCH, certify=True, rows_alone=4, batches=1, audited_batches=1)
    assert e.level == "broken" and e.first_episode_affected is None
    assert "no episode of this run was served an output computed in a shared batch" in (
        e.level_detail
    )


def test_a_failed_start_up_check_is_broken_even_for_an_unbatched_run() -> None:
    e = entry(mismatch={"found_by": "start-up check", "detail": "example 1: ..."})
    assert e.level == "broken" and function_level(e) == (e.level, e.level_detail)


# -- the run's level --------------------------------------------------------------------------
def info_of(*levels: str, timeouts: list[int] | None = None) -> DeterminismInfo:
    functions = {
        f"m.f{i}": BatchedFunctionInfo(
            mode="batched", verified=True, level=level, level_detail=f"why {i}"
        )
        for i, level in enumerate(levels)
    }
    info = DeterminismInfo(batched_functions=functions, timeouts=timeouts or [])
    info.settle()
    return info


@pytest.mark.parametrize(
    ("levels", "level"),
    [
        ((), "certified"),
        (("certified",), "certified"),
        (("certified", "sampled"), "sampled"),
        (("sampled", "unverified", "certified"), "unverified"),
        (("sampled", "broken", "unverified"), "broken"),
    ],
)
def test_the_run_is_its_worst_function(levels: tuple[str, ...], level: str) -> None:
    info = info_of(*levels)
    assert info.level == level and info.guaranteed is (level == "certified")
    if levels and level != "certified":
        assert info.level_detail == "; ".join(
            f"m.f{i}: why {i}" for i, lv in enumerate(levels) if lv == level
        )


def test_no_batched_function_is_certified() -> None:
    info = info_of()
    assert info.level == "certified" and "no batched function" in info.level_detail


@pytest.mark.parametrize(
    ("levels", "level"),
    [((), "unverified"), (("sampled",), "unverified"), (("broken",), "broken")],
)
def test_wall_clock_timeouts_cap_the_level_at_unverified(
    levels: tuple[str, ...], level: str
) -> None:
    info = info_of(*levels, timeouts=[3, 8])
    assert info.level == level and not info.guaranteed
    assert "wall-clock timeouts decided 2 episode(s) (first: 3)" in info.level_detail


def test_the_block_round_trips_with_level_and_guaranteed() -> None:
    info = info_of("certified", "sampled")
    dumped = info.model_dump(mode="json")
    assert dumped["level"] == "sampled" and dumped["guaranteed"] is False
    assert dumped["batched_functions"]["m.f1"]["level"] == "sampled"
    again = DeterminismInfo.model_validate(dumped)
    assert again.level == "sampled" and again == info


# -- older summaries (guaranteed, no level) ---------------------------------------------------
OLD_FUNCTION = {
    "mode": "padded",
    "verified": True,
    "verified_by": PASSED,
    "batches_audited": 3,
    "batched_requests": 10,
    "mismatch": None,
}


def test_an_old_guaranteed_summary_loads_as_sampled() -> None:
    old = {"guaranteed": True, "batched_functions": {"t.embed": OLD_FUNCTION}, "reasons": []}
    info = DeterminismInfo.model_validate(old)
    assert info.level == "sampled" and not info.guaranteed  # it rested on a sample at best
    assert info.batched_functions["t.embed"].level == "sampled"
    assert DeterminismInfo.model_validate({"guaranteed": True}).level == "sampled"


def test_an_old_summary_with_a_mismatch_loads_as_broken() -> None:
    broken = {**OLD_FUNCTION, "mode": "per_request", "verified": False, "mismatch": "audit: x"}
    old = {"guaranteed": False, "batched_functions": {"m.f": broken}, "reasons": ["x"]}
    info = DeterminismInfo.model_validate(old)
    assert info.level == "broken" and info.batched_functions["m.f"].level == "broken"


def test_an_old_unguaranteed_summary_loads_as_unverified() -> None:
    unchecked = {**OLD_FUNCTION, "verified": False, "verified_by": NO_CHECK}
    info = DeterminismInfo.model_validate(
        {"guaranteed": False, "batched_functions": {"m.f": unchecked}}
    )
    assert info.level == "unverified" and info.batched_functions["m.f"].level == "unverified"
    in_process = {**OLD_FUNCTION, "mode": "in_process", "batched_requests": 0}
    assert BatchedFunctionInfo.model_validate(in_process).level == "certified"


def test_an_old_run_summary_loads_whole() -> None:
    run = EvalRun.model_validate(
        {
            "run_id": "r",
            "graph_name": "g",
            "config": {"graph_name": "g"},
            "episodes_total": 0,
            "determinism": {"guaranteed": True, "shared_server_modes": {}},
        }
    )
    assert run.determinism.level == "sampled"
    assert run.model_dump(mode="json")["determinism"]["guaranteed"] is False


# -- the CLI's sentence and table -------------------------------------------------------------
def test_determinism_line_names_the_level_in_plain_words() -> None:
    certified = determinism_line(info_of("certified"))
    assert certified.startswith("determinism: certified — results are independent")
    assert determinism_line(info_of()).startswith("determinism: certified — the run used no")
    sampled = determinism_line(info_of("sampled"))
    assert sampled.startswith("determinism: sampled — m.f0: why 0.")
    assert "does not prove that results are independent of the worker count" in sampled
    assert sampled.endswith("rerun with --certify")
    assert determinism_line(info_of("unverified")).startswith("determinism: unverified — ")
    broken = determinism_line(info_of("sampled", "broken"))
    assert broken.startswith("determinism: BROKEN — m.f1: why 1.")
    for line in (sampled, broken, determinism_line(info_of("unverified"))):
        assert "guaranteed" not in line


def test_the_table_title_never_claims_a_guarantee_from_a_sample() -> None:
    assert "sampled (not proven)" in str(determinism_table(info_of("sampled")).title)
    assert "independent" not in str(determinism_table(info_of("sampled")).title)
    assert "BROKEN" in str(determinism_table(info_of("broken")).title)
