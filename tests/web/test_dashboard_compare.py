"""Comparing runs in the dashboard (real Chromium, real backend, real runs).

Three runs of ``babyai_oracle`` over the same episodes with different step budgets are
ranked in the leaderboard (ticked in the compare page's picker); ticking two of them
opens their paired view, which shows the overall paired difference in percentage points
with its interval and names the method behind every number. Screenshots:
test-artifacts/screenshots/compare_*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, shot

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)
pytest.importorskip("playwright.sync_api")

API = "/api/eval/v2"
RUN_DEADLINE_S = 180.0
BUDGETS = (None, 6, 4)  # the graph's own step budget, then tighter ones
WIDE = """() => [...document.querySelectorAll('body *')]
  .filter(el => el.getBoundingClientRect().right > document.documentElement.clientWidth + 1
    && !el.closest('.table-wrap'))
  .slice(0, 8).map(el => `${el.tagName}#${el.id}.${el.className}`)"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(tmp_path_factory.mktemp("compare")) as server:
        yield server


@pytest.fixture(scope="module")
def run_ids(backend: Backend) -> list[str]:
    ids = []
    for budget in BUDGETS:
        extra = {} if budget is None else {"step_budget": budget}
        ids.append(backend.start_run("babyai_oracle", episode_count=2, worker_count=2, **extra))
    for run_id in ids:
        backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
    return ids


def test_leaderboard_of_three_runs_then_the_paired_view_of_two(
    backend: Backend, run_ids: list[str], page: Any
) -> None:
    board = backend.http.get(f"{API}/leaderboard", params={"runs": ",".join(run_ids)}).json()
    ranked = [r["run_id"] for r in board["runs"]]
    page.goto(f"{backend.url}/#/compare")
    for run_id in run_ids:  # ticked in the picker's checkboxes
        page.check(f"#leaderboard-runs input[value='{run_id}']")
    page.click("#leaderboard-form button[type=submit]")
    rows = page.locator("#leaderboard-table tbody tr")
    rows.first.wait_for()
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.runId)") == ranked
    first = board["runs"][0]
    top_cell = rows.first.locator("td.rate").first.inner_text()
    assert f"{100 * first['overall']['rate']:.1f} %" in top_cell and "n=" in top_cell
    assert rows.first.locator(f"a[href='#/run/{ranked[0]}']").count() == 1
    header = page.locator("#leaderboard-table thead").inner_text()
    assert all(task in header for task in board["tasks"])
    assert "Wilson" in page.locator("#leaderboard-methods").inner_text()
    shot(page, "compare_01_leaderboard")

    pair_button = page.locator("#leaderboard-pair")
    assert pair_button.is_disabled()
    page.check(f"#leaderboard-table tr[data-run-id='{ranked[0]}'] input[type=checkbox]")
    page.check(f"#leaderboard-table tr[data-run-id='{ranked[-1]}'] input[type=checkbox]")
    pair_button.click()
    delta = page.locator("#overall-delta")
    delta.wait_for()
    expected = backend.http.get(f"{API}/compare", params={"a": ranked[0], "b": ranked[-1]}).json()
    overall = expected["overall"]
    assert delta.inner_text() == f"−{abs(100 * overall['delta']):.1f} pp"
    interval = page.locator("#overall-interval").inner_text()
    assert interval.startswith("95 % interval [") and interval.endswith(" pp]")
    methods = page.locator("#compare-methods").inner_text()
    assert "McNemar" in methods and "Wilson" in methods and "percentage points" in methods
    deltas = page.locator("#delta-table tbody").inner_text()
    assert "pp" in deltas and "0.700" not in deltas
    assert page.locator("#leaderboard-table").count() == 1  # the board stays above the pair
    shot(page, "compare_02_paired_overall_difference")

    page.set_viewport_size({"width": 390, "height": 900})  # a phone: nothing scrolls sideways
    page.reload()
    page.locator("#overall-delta").wait_for()
    page.locator("#leaderboard-table tbody tr").first.wait_for()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the compare page is {width} px wide at 390 px: {page.evaluate(WIDE)}"
    rates = page.locator("#leaderboard-table td.rate")  # every success column stays in view
    assert rates.count() == len(ranked) * (1 + len(board["tasks"]))
    for box in rates.evaluate_all("cs => cs.map(c => c.getBoundingClientRect().toJSON())"):
        assert box["x"] >= 0 and box["right"] <= 390 and box["width"] > 0, box
    shot(page, "compare_03_narrow_390px")
