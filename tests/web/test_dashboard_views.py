"""What a researcher sees at 1440×900 and on a phone (390×844), in real Chromium against a
real backend with real runs.

The runs list shows success and its interval without scrolling (bounding boxes against the
viewport); its filters live in the URL (a reload reproduces the view, Back restores the one
before); runs go by their names in the compare pickers, the leaderboard (picked with
checkboxes) and the run cards; metric columns sort; the frame panel stays in view while the
firing log scrolls; the start form's priority reaches the queued run. One backend for the
module (support.truth_workspace: the fast ``walk`` graph beside the built-in ones).
Screenshots: test-artifacts/screenshots/views_*.png.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from support.backend import Backend
from support.browser import (
    CHROMIUM,
    NO_CHROMIUM,
    SCREENSHOTS,
    checked_page,
    open_route,
    shot,
)
from support.truth_workspace import write_truth_workspace

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)

API = "/api/eval/v2"
RUN_DEADLINE_S = 120.0
ROWS = "#runs-table tbody tr[data-run-id]"
SHOWN_IDS = "rs => rs.map(r => r.dataset.runId)"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(write_truth_workspace(tmp_path_factory.mktemp("views_ws"))) as backend:
        yield backend


@pytest.fixture(scope="module")
def runs(backend: Backend) -> dict[str, str]:
    """Two named runs of babyai_oracle that differ in three config fields (so the runs list
    has config-diff columns), the first with frames; a named run of walk (another graph)."""
    ids = {
        "base": backend.start_run(
            "babyai_oracle", 2, 2, save_frames=True, name="oracle base", tags=["baseline"]
        ),
        "tight": backend.start_run(
            "babyai_oracle", 2, 2, step_budget=4, seed=7, name="oracle tight", tags=["tight"]
        ),
        "walk": backend.start_run("walk", 2, 1, name="a walk"),
    }
    backend.wait_finished(list(ids.values()), RUN_DEADLINE_S)
    return ids


def in_viewport(box: dict[str, float] | None, width: int, height: int) -> bool:
    return (
        box is not None
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width
        and box["y"] + box["height"] <= height
    )


def shown_ids(page: Any) -> list[str]:
    return list(page.locator(ROWS).evaluate_all(SHOWN_IDS))


def wait_shown(page: Any, ids: set[str], exact: bool = True) -> None:
    """Until the runs list shows exactly ``ids`` (or at least them, ``exact=False``)."""
    page.wait_for_function(
        "([sel, ids, exact]) => { const shown = [...document.querySelectorAll(sel)]"
        ".map(r => r.dataset.runId); return ids.every(i => shown.includes(i))"
        " && (!exact || shown.length === ids.length); }",
        arg=[ROWS, sorted(ids), exact],
    )


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_runs_list_shows_success_and_its_interval_without_scrolling(
    backend: Backend, runs: dict[str, str], browser: Any, width: int, height: int
) -> None:
    run_id = runs["tight"]
    success = backend.api("GET", f"{API}/status/{run_id}", params={"compact": True})[
        "aggregate_metrics"
    ]["success"]
    with checked_page(browser, width, height) as page:
        open_route(page, backend, "#/")
        cell = page.locator(f"#runs-table tr[data-run-id='{run_id}'] td[data-col=success]")
        interval = cell.locator(".interval")
        interval.wait_for()
        assert (
            interval.inner_text() == f"[{100 * success['lo']:.1f} %, {100 * success['hi']:.1f} %]"
        )
        assert cell.locator(".rate").inner_text() == f"{100 * success['mean']:.1f} %"
        assert page.evaluate("[window.scrollX, window.scrollY]") == [0, 0]
        for part in (cell.locator(".rate"), interval, cell.locator(".coverage")):
            assert in_viewport(part.bounding_box(), width, height), (width, part.bounding_box())
        diff = page.locator(f"#runs-table tr[data-run-id='{run_id}'] td[data-col='diff:seed']")
        assert diff.inner_text() == "7"  # the config differences are there, after success
        if width > 600:
            diff_box, cell_box = diff.bounding_box(), cell.bounding_box()
            assert diff_box is not None and cell_box is not None and diff_box["x"] > cell_box["x"]
        assert page.evaluate("document.scrollingElement.scrollWidth") <= width
        shot(page, f"views_01_runs_list_{width}px")


def test_the_runs_filters_live_in_the_url(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    oracle = {runs["base"], runs["tight"]}
    open_route(page, backend, "#/")
    page.wait_for_selector("#runs-graph option[value='walk']", state="attached")
    page.select_option("#runs-graph", "babyai_oracle")
    page.wait_for_function("location.hash === '#/?graph=babyai_oracle'")
    wait_shown(page, oracle)
    page.select_option("#runs-tag", "tight")
    page.wait_for_function("location.hash === '#/?tag=tight&graph=babyai_oracle'")
    wait_shown(page, {runs["tight"]})

    page.reload()  # the link reproduces the view
    wait_shown(page, {runs["tight"]})
    assert page.input_value("#runs-tag") == "tight"
    assert page.input_value("#runs-graph") == "babyai_oracle"
    page.go_back()  # Back restores the view before the tag
    page.wait_for_function("location.hash === '#/?graph=babyai_oracle'")
    wait_shown(page, oracle)
    assert page.input_value("#runs-tag") == ""
    page.go_back()
    wait_shown(page, {*oracle, runs["walk"]}, exact=False)
    assert page.input_value("#runs-graph") == ""

    page.fill("#runs-search", "oracle base")
    page.wait_for_function("location.hash === '#/?q=oracle+base'")
    wait_shown(page, {runs["base"]})
    page.goto(f"{backend.url}/#/?q=oracle+base&status=completed")  # a link someone sent
    wait_shown(page, {runs["base"]})
    assert page.input_value("#runs-search") == "oracle base"
    assert page.input_value("#runs-filter") == "completed"
    shot(page, "views_02_runs_filtered_from_the_url")


def test_names_in_the_pickers_the_leaderboard_and_the_run_cards(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    base, tight = runs["base"], runs["tight"]
    open_route(page, backend, "#/compare")
    option = page.locator(f"#compare-a option[value='{base}']")
    option.wait_for(state="attached")
    assert option.inner_text().startswith(f"oracle base — {base} [baseline]")
    rank = page.locator("#leaderboard-rank")
    assert rank.is_disabled()
    for run_id in (base, tight):  # a tap anywhere on the row ticks its box
        label = page.locator(f"#leaderboard-runs li[data-run-id='{run_id}'] label")
        assert "oracle" in label.inner_text() and run_id in label.inner_text()
        box = label.bounding_box()
        assert box is not None and box["height"] >= 40  # a touch target
        label.click()
        assert label.locator("input[type=checkbox]").is_checked()
    assert rank.inner_text() == "Rank 2 runs"
    rank.click()
    page.wait_for_function(
        "ids => location.hash.startsWith('#/compare?runs=')"
        " && location.hash.slice(15).split(',').sort().join() === ids",
        arg=",".join(sorted([base, tight])),
    )
    rows = page.locator("#leaderboard-table tbody tr")
    rows.first.wait_for()
    board = backend.http.get(f"{API}/leaderboard", params={"runs": f"{base},{tight}"}).json()
    assert rows.locator(".run-link").all_inner_texts() == [r["name"] for r in board["runs"]]
    assert rows.locator(".run-id").all_inner_texts() == [r["run_id"] for r in board["runs"]]
    shot(page, "views_03_leaderboard_by_name")

    for run_id in (base, tight):
        page.check(f"#leaderboard-table tr[data-run-id='{run_id}'] input[type=checkbox]")
    page.click("#leaderboard-pair")
    card_a = page.locator(".run-card[data-side=a]")
    card_a.wait_for()
    assert card_a.locator(".run-link").inner_text() == "oracle base"
    assert card_a.locator(".run-id").inner_text() == base
    assert page.locator(".run-card[data-side=b] .run-link").inner_text() == "oracle tight"


def test_metric_columns_sort_by_number(backend: Backend, runs: dict[str, str], page: Any) -> None:
    run_id = runs["base"]
    open_route(page, backend, f"#/run/{run_id}")
    page.wait_for_selector("#episode-table tbody tr[data-index]")
    heads = page.locator("#episode-table thead th").all_inner_texts()
    column = heads.index("return") + 1
    page.click("#episode-table button[data-sort='metric.return']")  # highest first
    page.wait_for_selector("#episode-table th[aria-sort=descending] [data-sort='metric.return']")
    expected = backend.api(
        "GET", f"{API}/runs/{run_id}/episodes", params={"sort": "metric.return:desc"}
    )["episodes"]
    shown = page.locator("#episode-table tbody tr").evaluate_all(
        SHOWN_IDS.replace("runId", "index")
    )
    assert [int(i) for i in shown] == [e["index"] for e in expected]
    values = [
        float(t)
        for t in page.locator(f"#episode-table tbody td:nth-child({column})").all_inner_texts()
    ]
    assert values == sorted(values, reverse=True) and len(set(values)) > 1
    page.click("#episode-table button[data-sort='metric.return']")
    page.wait_for_selector("#episode-table th[aria-sort=ascending] [data-sort='metric.return']")
    again = page.locator(f"#episode-table tbody td:nth-child({column})").all_inner_texts()
    assert [float(t) for t in again] == sorted(values)

    tasks = page.locator("#task-table tbody tr")
    names = tasks.evaluate_all("rs => rs.map(r => r.dataset.task)")
    page.click("#task-table button[data-sort=task]")
    page.click("#task-table button[data-sort=task]")  # descending
    assert tasks.evaluate_all("rs => rs.map(r => r.dataset.task)") == sorted(names, reverse=True)
    page.click("#task-table button[data-sort='metric.return']")  # highest mean first
    task_heads = page.locator("#task-table thead th").all_inner_texts()
    nth = next(i for i, h in enumerate(task_heads) if h.startswith("return")) + 1
    means = page.locator(f"#task-table tbody td:nth-child({nth})").evaluate_all(
        "cs => cs.map(c => Number(c.dataset.sort))"
    )
    assert means == sorted(means, reverse=True) and len(means) == len(names)
    shot(page, "views_04_sorted_metric_columns")


def test_the_frame_panel_stays_in_view_while_the_firing_log_scrolls(
    backend: Backend, runs: dict[str, str], browser: Any
) -> None:
    width, height = 1440, 900
    with checked_page(browser, width, height) as page:
        open_route(page, backend, f"#/run/{runs['base']}/episode/0")
        page.wait_for_function("document.querySelector('img#frame')?.naturalWidth > 0")
        page.wait_for_selector("#log-table tbody tr[data-step]")
        frames = page.locator("#frames-panel")
        assert frames.evaluate("e => getComputedStyle(e).position") == "sticky"
        log_rows = page.locator("#log-table tbody tr[data-step]")
        log_rows.last.scroll_into_view_if_needed()  # to the end of the firing log
        log_box = page.locator("#log-panel").bounding_box()
        assert log_box is not None and log_box["y"] < 0, "the log did not scroll past the top"
        assert page.evaluate("window.scrollY") > 0
        assert in_viewport(frames.bounding_box(), width, height), frames.bounding_box()
        assert in_viewport(page.locator("img#frame").bounding_box(), width, height)
        topbar = page.locator(".topbar").bounding_box()
        frames_box = frames.bounding_box()
        assert topbar is not None and frames_box is not None
        assert frames_box["y"] >= topbar["y"] + topbar["height"]  # not under the top bar
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # the viewport: what stays in view
        page.screenshot(path=str(SCREENSHOTS / "views_05_sticky_frames.png"))


def test_the_start_forms_priority_reaches_the_queued_run(backend: Backend, page: Any) -> None:
    starts: list[str] = []
    page.on("request", lambda r: starts.append(r.url) if r.url.endswith("/start") else None)
    open_route(page, backend, "#/")
    page.wait_for_selector("#f-graph_name option[value='walk']", state="attached")
    page.select_option("#f-graph_name", "walk")
    page.fill("#f-episode_count", "1")
    page.fill("#f-priority", "101")
    page.click("#start-form button[type=submit]")
    assert page.locator("[data-error-for=priority]").inner_text() == "must be at most 100"
    assert starts == []
    page.fill("#f-priority", "7")
    page.click("#start-form button[type=submit]")
    run_id = page.get_attribute("#start-message [data-run-id]", "data-run-id")
    spec = json.loads((backend.run_dir(run_id) / "spec.json").read_text())
    assert spec["scheduling"]["priority"] == 7
    backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
