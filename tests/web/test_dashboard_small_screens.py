"""Every dashboard page at 390 px wide (a phone), in real Chromium against a real backend.

No page scrolls sideways (``document.scrollingElement.scrollWidth <= innerWidth``): wide
tables, the graph diagram and the charts scroll inside their own boxes, at a size that can be
read, instead of shrinking. An unknown run id shows "No such run" with a link back.
Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, checked_page, shot

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)

PHONE_W, PHONE_H = 390, 844
MIN_READABLE_SCALE = 0.95  # an SVG drawn at less than this of its own size is shrunk


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(tmp_path_factory.mktemp("phone_ws")) as backend:
        yield backend


@pytest.fixture(scope="module")
def runs(backend: Backend) -> list[str]:
    """Two finished babyai_oracle runs (the first with frames), named and tagged."""
    first = backend.start_run(
        "babyai_oracle",
        1,
        2,
        save_frames=True,
        name="a rather long run name for a phone",
        tags=["baseline", "phone"],
    )
    second = backend.start_run("babyai_oracle", 1, 2, step_budget=4, tags=["tight"])
    return [backend.wait_status(run_id, "completed")["run_id"] for run_id in (first, second)]


@pytest.fixture
def phone(browser: Any) -> Iterator[Any]:
    with checked_page(browser, PHONE_W, PHONE_H) as page:
        yield page


def assert_no_sideways_scroll(page: Any, what: str) -> None:
    widths = page.evaluate(
        "() => [document.scrollingElement.scrollWidth, window.innerWidth,"
        " [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
        " > window.innerWidth + 1 && !e.closest('.table-wrap, .graph-wrap, .chart-wrap'))"
        ".slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)]"
    )
    scroll, inner, culprits = widths
    assert inner == PHONE_W
    assert scroll <= inner, f"{what} scrolls sideways: {scroll} > {inner}; wide: {culprits}"


def drawn_scale(page: Any, selector: str) -> float:
    """How large the first ``selector`` SVG is drawn, relative to its own viewBox width."""
    return float(
        page.locator(selector).first.evaluate(
            "s => s.getBoundingClientRect().width / s.viewBox.baseVal.width"
        )
    )


def visit(page: Any, backend: Backend, route: str, ready: str) -> None:
    page.goto(f"{backend.url}/{route}")
    page.wait_for_selector(ready, state="attached")


def test_runs_list_and_start_form_fit_a_phone(
    backend: Backend, runs: list[str], phone: Any
) -> None:
    visit(phone, backend, "#/", f"#runs-table tr[data-run-id='{runs[0]}']")
    phone.wait_for_selector("#f-graph_name option[value='babyai_oracle']", state="attached")
    assert_no_sideways_scroll(phone, "the runs list")
    assert phone.locator("#start-form").is_visible()
    assert phone.locator("#runs-table td[data-col='diff:step_budget']").count() == 2
    shot(phone, "phone_01_runs_list_and_start_form")


def test_run_page_fits_a_phone_with_readable_graph_and_charts(
    backend: Backend, runs: list[str], phone: Any
) -> None:
    visit(phone, backend, f"#/run/{runs[0]}", "#episode-table tbody tr[data-index]")
    phone.wait_for_selector("svg.graph g.node")
    phone.wait_for_selector("#task-chart svg")
    phone.wait_for_selector("#histogram-table svg.histogram")
    assert_no_sideways_scroll(phone, "the run page")
    assert drawn_scale(phone, "svg.graph") >= MIN_READABLE_SCALE
    assert drawn_scale(phone, "#task-chart svg") >= MIN_READABLE_SCALE * 520 / 680
    assert drawn_scale(phone, "svg.histogram") >= MIN_READABLE_SCALE
    assert phone.locator(".run-header h1").inner_text() == "a rather long run name for a phone"
    shot(phone, "phone_02_run_page")


def test_episode_page_fits_a_phone(backend: Backend, runs: list[str], phone: Any) -> None:
    visit(phone, backend, f"#/run/{runs[0]}/episode/0", "#episode-json")
    phone.wait_for_function("document.querySelector('#episode-json').textContent.length > 0")
    phone.wait_for_function("[...document.images].every(i => i.complete)")
    assert_no_sideways_scroll(phone, "the episode page")
    shot(phone, "phone_03_episode_page")


def test_compare_page_fits_a_phone(backend: Backend, runs: list[str], phone: Any) -> None:
    visit(phone, backend, f"#/compare?a={runs[0]}&b={runs[1]}", "#delta-table")
    assert_no_sideways_scroll(phone, "the compare page")
    for select in ("#compare-a", "#compare-b"):
        box = phone.locator(select).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE_W
    shot(phone, "phone_04_compare")


@pytest.mark.parametrize("run_id", ["20200101_000000", "no-such-run"])
def test_an_unknown_run_says_so_with_a_link_back(backend: Backend, phone: Any, run_id: str) -> None:
    visit(phone, backend, f"#/run/{run_id}", "#no-such-run")
    text = phone.locator("#no-such-run").inner_text()
    assert "No such run" in text and run_id in text
    assert "^" not in text and "pattern" not in text  # not the id's regex
    assert phone.locator("#outcomes-panel, #episodes-panel").count() == 0
    assert_no_sideways_scroll(phone, "the unknown-run page")
    if run_id.startswith("2020"):
        shot(phone, "phone_05_unknown_run")
    phone.click("#back-to-runs")
    phone.wait_for_selector("#runs-panel")
