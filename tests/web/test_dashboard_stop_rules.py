"""Stop rules and anytime-valid statistics on the dashboard, in real Chromium against a real
backend.

One ``agentcanvas serve`` per module: a baseline run of babyai_oracle with a step budget of 5
(the oracle fails about half its episodes within 5 steps), then a run of babyai_oracle with
``until_decided_vs`` that baseline, which its stop rule ends after a few of its 200 planned
episodes, decided "B better". The stopped run's page shows the stop report (decision,
episodes used, e-value against 1/alpha, method) and the success rate's anytime-valid
confidence sequence apart from the fixed-n interval, and nothing on it reads as cancelled or
missing; the compare page shows the anytime-valid verdict; a slow run's page shows the
sequence while the run goes. Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, open_route, shot

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)

RUN_DEADLINE_S = 120.0
EPISODES_PER_TASK = 100
TASKS = 2
SLOW_LATENCY_MS = 150.0
SLOW_EPISODES_PER_TASK = 4
HALFWIDTH = 0.2
UNREACHABLE_HALFWIDTH = 0.01  # needs thousands of episodes: never within the slow run's cap


def _fmt_num(x: float) -> str:
    """The dashboard's fmtNum (format.js): an integer as is, else three decimals."""
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def _fmt_sig(x: float) -> str:
    """The dashboard's fmtSig (stop_rules.js): three significant figures, no trailing zeros."""
    value = float(f"{x:.3g}")
    return str(int(value)) if value.is_integer() else str(value)


def _cs_text(cs: dict[str, Any]) -> str:
    return f"[{_fmt_num(cs['lo'])}, {_fmt_num(cs['hi'])}]"


def _slow_oracle() -> str:
    graph = json.loads(
        resources.files("agentcanvas").joinpath("graphs/babyai_oracle.json").read_text()
    )
    graph["name"] = "babyai_slow"
    graph["env"]["fields"]["step_latency_ms"] = SLOW_LATENCY_MS
    return json.dumps(graph)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    workspace = tmp_path_factory.mktemp("stop_rules_ws")
    (workspace / "graphs").mkdir()
    (workspace / "graphs" / "babyai_slow.json").write_text(_slow_oracle())
    with Backend(workspace) as backend:
        yield backend


@pytest.fixture(scope="module")
def runs(backend: Backend) -> dict[str, str]:
    """``baseline`` (step budget 5: about half its episodes fail) and ``stopped`` (no budget,
    until decided against the baseline), both completed."""
    baseline = backend.start_run("babyai_oracle", EPISODES_PER_TASK, 2, step_budget=5)
    backend.wait_status(baseline, "completed", RUN_DEADLINE_S)
    stopped = backend.start_run("babyai_oracle", EPISODES_PER_TASK, 2, until_decided_vs=baseline)
    backend.wait_status(stopped, "completed", RUN_DEADLINE_S)
    return {"baseline": baseline, "stopped": stopped}


def test_the_stopped_run_page_shows_its_stop_report_and_its_confidence_sequence(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    run_id = runs["stopped"]
    summary = backend.status(run_id)
    stop, cs = summary["stop"], summary["live_interval"]
    planned = EPISODES_PER_TASK * TASKS
    assert stop["decision"] == "B better" and stop["decided"], stop
    assert stop["episodes_planned"] == planned and stop["episodes_used"] < planned, stop
    assert summary["status"] == "completed" and summary["health"]["verdict"] == "clean"
    used, saved = stop["episodes_used"], planned - stop["episodes_used"]

    open_route(page, backend, f"#/run/{run_id}")
    report = page.locator("#stop-report")
    report.locator("#stop-decision").wait_for()
    assert report.is_visible()
    assert page.locator("#stop-decision").inner_text() == "B better"
    assert report.locator(".stop-report").get_attribute("data-state") == "decided"
    assert "until_decided_vs" in page.locator("#stop-rule").inner_text()
    assert runs["baseline"] in page.locator("#stop-rule").inner_text()
    compare_href = page.locator("#stop-compare").get_attribute("href")
    assert compare_href == f"#/compare?a={runs['baseline']}&b={run_id}"
    episodes = page.locator("#stop-episodes").inner_text()
    assert f"after {used} of {planned} planned episodes ({saved} not run" in episodes
    evidence = page.locator("#stop-evidence").inner_text()
    assert evidence == f"e-value {_fmt_sig(stop['evidence'])} ≥ {_fmt_sig(stop['threshold'])} = 1/α"
    assert evidence == "e-value 26.8 ≥ 20 = 1/α"  # the plan is seeded: the same every time
    pairs = page.locator("#stop-pairs").inner_text()
    assert pairs.startswith(f"{stop['b_wins']} only this run succeeded on, {stop['a_wins']}")
    assert page.locator("#stop-method").inner_text() == stop["method"]
    assert "anytime-valid McNemar" in stop["method"] and "Howard et al. 2021" in stop["method"]
    if stop["kept_apart"]:
        kept = page.locator("#stop-kept-apart").inner_text()
        assert kept.startswith(f"{stop['kept_apart']} episode(s)") and "past_stop/" in kept
    assert page.locator("#stop-halfwidth").count() == 0

    # The anytime-valid sequence, apart from the fixed-n interval and named as such.
    live_cs = page.locator("#aggregates-panel #live-cs")
    assert live_cs.get_attribute("data-state") == "final"
    assert float(live_cs.get_attribute("data-lo") or "nan") == cs["lo"]
    assert float(live_cs.get_attribute("data-hi") or "nan") == cs["hi"]
    assert live_cs.locator(".cs-interval").inner_text() == _cs_text(cs)
    text = live_cs.inner_text()
    assert f"anytime-valid 95 % CS {_cs_text(cs)} over {cs['n']} scored episodes" in text
    assert cs["method"] in text and live_cs.get_attribute("title") == cs["method"]
    fixed = summary["aggregate_metrics"]["success"]
    row = page.locator("#aggregate-table tr[data-metric=success] td")
    assert row.nth(2).inner_text() == f"[{_fmt_num(fixed['lo'])}, {_fmt_num(fixed['hi'])}]"

    # A run its rule ended is completed: the rest of its plan was not needed, not missing.
    assert page.locator(".run-header .status-slot").inner_text() == "completed"
    assert page.locator(".stat.not-run").count() == 0
    assert page.locator(".stat.not-needed strong").inner_text() == str(saved)
    assert "not needed" in page.locator(".stat.not-needed").inner_text()
    bar = page.locator(".run-header .progress")
    assert bar.get_attribute("data-stopped") == "true"
    assert bar.locator(".progress-text").inner_text() == (
        f"{used}/{planned} · stop rule decided: {saved} not needed"
    )
    assert page.locator(".run-header .actions button").count() == 0  # no resume
    assert "cancel" not in page.locator(".run-header").inner_text().lower()
    shot(page, "stop_rules_01_stopped_run_page")

    open_route(page, backend, f"#/run/{runs['baseline']}")  # no rule: the sequence, no panel
    page.locator("#live-cs[data-state='final']").wait_for()
    assert page.locator("#stop-report").is_hidden()
    assert page.locator(".stat.not-needed").count() == 0

    open_route(page, backend, "#/")
    listed = page.locator(f"#runs-table tr[data-run-id='{run_id}']")
    listed.locator(".progress[data-stopped='true']").wait_for()
    assert listed.locator("[data-col=status]").inner_text() == "completed"
    assert listed.locator("button.resume").count() == 0
    baseline_row = page.locator(f"#runs-table tr[data-run-id='{runs['baseline']}']")
    assert baseline_row.locator(".progress").get_attribute("data-stopped") == "false"


def test_a_run_stopped_once_narrow_enough_shows_its_half_width(backend: Backend, page: Any) -> None:
    run_id = backend.start_run("babyai_oracle", EPISODES_PER_TASK, 2, until_halfwidth=HALFWIDTH)
    summary = backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
    stop, cs = summary["stop"], summary["live_interval"]
    assert stop["rule"] == "until_halfwidth" and stop["decision"] == "narrow enough", stop
    assert stop["halfwidth"] <= HALFWIDTH and stop["evidence"] is None
    assert stop["halfwidth"] == pytest.approx((cs["hi"] - cs["lo"]) / 2)

    open_route(page, backend, f"#/run/{run_id}")
    page.locator("#stop-decision").wait_for()
    assert page.locator("#stop-decision").inner_text() == "narrow enough"
    halfwidth = page.locator("#stop-halfwidth").inner_text()
    assert halfwidth.startswith(f"±{_fmt_num(stop['halfwidth'])} (target ±{HALFWIDTH:g})")
    assert page.locator("#stop-evidence").count() == 0
    assert page.locator("#stop-method").inner_text() == stop["method"]
    assert page.locator("#live-cs .cs-interval").inner_text() == _cs_text(cs)
    used, planned = stop["episodes_used"], stop["episodes_planned"]
    assert (
        f"after {used} of {planned} planned episodes" in page.locator("#stop-episodes").inner_text()
    )
    shot(page, "stop_rules_03_halfwidth_run_page")


def test_the_compare_page_shows_the_anytime_valid_verdict(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    baseline, stopped = runs["baseline"], runs["stopped"]
    seq = backend.api("GET", "/api/eval/v2/compare", params={"a": baseline, "b": stopped})[
        "sequential"
    ]
    assert seq["decided"] and seq["decision"] == "B better", seq

    open_route(page, backend, f"#/compare?a={baseline}&b={stopped}")
    verdict = page.locator("#mcnemar-panel #sequential-verdict")
    verdict.wait_for()
    assert page.locator("#sequential").get_attribute("data-decided") == "true"
    expected = (
        f"decided: B better (e-value {_fmt_sig(seq['evidence'])} ≥ "
        f"{_fmt_sig(seq['threshold'])} = 1/α)"
    )
    assert verdict.inner_text() == expected
    assert page.locator("#sequential-method").inner_text() == seq["method"]
    # The stop rule's field changes which episodes ran, not their scores: apart, no warning.
    assert page.locator("#config-warning").count() == 0
    assert "differ only in step_budget" in page.locator("#config-note").inner_text()
    assert "until_decided_vs" in page.locator("#config-stop-rule").inner_text()
    assert "ended by its stop rule (until_decided_vs): B better" in (
        page.locator(".run-card").nth(1).inner_text()
    )
    shot(page, "stop_rules_02_compare_decided")

    open_route(page, backend, f"#/compare?a={stopped}&b={baseline}")
    page.locator("#sequential-verdict").wait_for()
    assert page.locator("#sequential-verdict").inner_text().startswith("decided: B worse (")


def test_a_live_run_page_shows_the_confidence_sequence_as_it_goes(
    backend: Backend, page: Any
) -> None:
    """A run with a rule takes its episodes in plan order, so the prefix the sequence rests
    on grows with each episode; a half-width it cannot reach keeps it going to its cap."""
    run_id = backend.start_run(
        "babyai_slow", SLOW_EPISODES_PER_TASK, 1, until_halfwidth=UNREACHABLE_HALFWIDTH
    )
    open_route(page, backend, f"#/run/{run_id}")
    seen: list[dict[str, Any]] = []
    shot_taken = False
    deadline = time.monotonic() + RUN_DEADLINE_S
    while time.monotonic() < deadline:
        sample = page.evaluate(
            """() => {
              const cs = document.querySelector('#live-cs');
              const bar = document.querySelector('.run-header .progress');
              const stop = document.querySelector('#stop-report .stop-report');
              return { status: bar?.dataset.status ?? '', state: cs?.dataset.state ?? null,
                       n: cs?.dataset.n ?? null, stop: stop?.dataset.state ?? null,
                       text: cs?.querySelector('.cs-interval')?.textContent ?? null };
            }"""
        )
        seen.append(sample)
        if not shot_taken and sample["status"] == "running" and sample["n"] not in (None, "1"):
            shot(page, "stop_rules_04_live_run_cs")
            shot_taken = True
        if sample["status"] == "completed":
            break
        time.sleep(0.1)
    live = [s for s in seen if s["status"] == "running" and s["state"] == "live"]
    assert live, f"never saw the sequence while the run went: {seen[-3:]}"
    assert all(s["text"] and s["text"].startswith("[") for s in live), live[:3]
    assert len({s["n"] for s in live}) >= 3, f"the sequence did not advance live: {live[-3:]}"
    assert {s["stop"] for s in live} == {"pending"}, live[-3:]

    summary = backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
    final, planned = summary["live_interval"], SLOW_EPISODES_PER_TASK * TASKS
    assert summary["stop"]["decision"] == "not narrow enough at the cap", summary["stop"]
    page.wait_for_function(
        "text => document.querySelector('#live-cs')?.dataset.state === 'final'"
        " && document.querySelector('#live-cs .cs-interval').textContent === text",
        arg=_cs_text(final),
    )
    assert page.locator("#live-cs").get_attribute("data-n") == str(final["n"]) == str(planned)
    page.locator("#stop-report .stop-report[data-state='cap']").wait_for()
    assert page.locator("#stop-decision").inner_text() == "not narrow enough at the cap"
    assert f"on all {planned} of {planned} planned episodes" in (
        page.locator("#stop-episodes").inner_text()
    )
    assert page.locator(".stat.not-needed").count() == 0
    assert page.locator(".run-header .progress").get_attribute("data-stopped") == "false"
