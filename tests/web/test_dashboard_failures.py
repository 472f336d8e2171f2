"""Why episodes failed, and running them again, in real Chromium against a real backend: the
run page's Failures panel (groups, counts, kinds in words, episode links, a long list
collapsed), the episode table's reason, the episode page's traceback (text in a <pre>), and
Rerun failures making a linked run whose page says "retry of" the original, which lists it.

One ``agentcanvas serve`` per module on ``support.failure_workspace``: a run of ``mixed`` with
13 episodes per task (explode: 13 exceptions; walk: 6 node errors in ``mid``, 7 successes).
Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, open_route, shot
from support.failure_workspace import write_failure_workspace

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)

EPISODES = 13  # per task: the explode group's 13 links are more than the 12 shown
RUN_DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    backend = Backend(write_failure_workspace(tmp_path_factory.mktemp("failures_ws")))
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="module")
def run_id(backend: Backend) -> str:
    run = backend.start_run("mixed", EPISODES, 2, name="mixed web")
    backend.wait_status(run, "completed", RUN_DEADLINE_S)
    return run


def test_the_failures_panel_groups_with_counts_and_episode_links(
    backend: Backend, run_id: str, page: Any
) -> None:
    open_route(page, backend, f"#/run/{run_id}")
    rows = page.locator("#failures-table tbody tr")
    rows.first.wait_for()
    assert page.locator("#failures-panel h2").inner_text() == "Failures (19 of 26 episodes)"
    assert rows.count() == 2
    explode, mid = rows.nth(0), rows.nth(1)
    assert (explode.get_attribute("data-count"), mid.get_attribute("data-count")) == ("13", "6")
    assert explode.locator(".failure-kind").inner_text() == "exception outside the nodes"
    assert mid.locator(".failure-kind").inner_text() == "exception in node mid"
    assert "fglue.mid: RuntimeError: mid failed on episode 1" in mid.inner_text()
    # 12 links shown, the 13th folded away
    assert explode.locator(".episode-links > a").count() == 12
    assert explode.locator("details.more-episodes summary").inner_text() == "+1 more"
    assert mid.locator(".episode-links a").count() == 6
    # the episode table says why, from the record's fields (not "node errors in: mid")
    why = page.locator("#episode-table tbody tr[data-index='1'] td").last
    assert (
        why.inner_text()
        == "exception in node mid: fglue.mid: RuntimeError: mid failed on episode 1"
    )
    shot(page, "failures_01_run_page_panel")

    mid.locator(".episode-links a[data-episode='3']").click()
    page.wait_for_url(f"**/#/run/{run_id}/episode/3")
    trace = page.locator("details.traceback[data-node='mid'] pre")
    trace.wait_for()
    text = trace.inner_text()
    assert text.startswith("Traceback (most recent call last)")
    assert text.rstrip().endswith("RuntimeError: mid failed on episode 3")
    assert trace.evaluate("pre => pre.children.length") == 0  # text, never parsed as HTML
    assert page.locator("#end-reason").inner_text() == "exception in node mid (error)"
    shot(page, "failures_02_episode_traceback")


def test_rerun_failures_makes_a_linked_run(backend: Backend, run_id: str, page: Any) -> None:
    open_route(page, backend, f"#/run/{run_id}")
    page.locator("button.rerun-errors").wait_for()
    assert page.locator("button.rerun-errors").inner_text() == "Rerun errors (19)"
    page.locator("button.rerun-failures").click()
    page.wait_for_function(
        f"() => location.hash.startsWith('#/run/') && !location.hash.endsWith('{run_id}')"
    )
    retry = page.evaluate("() => decodeURIComponent(location.hash.slice('#/run/'.length))")
    link = page.locator("#retry-of-link")
    link.filter(has_text="mixed web").wait_for()  # the original's name, once its meta came
    assert link.get_attribute("href") == f"#/run/{run_id}"
    summary = backend.wait_status(retry, "completed", RUN_DEADLINE_S)
    assert summary["config"]["retry_of"] == run_id and summary["episodes_total"] == 19
    shot(page, "failures_03_retry_run_page")

    link.click()
    page.wait_for_url(f"**/#/run/{run_id}")
    listed = page.locator(f"#retries li[data-run-id='{retry}'] a").first
    listed.wait_for()
    assert listed.get_attribute("href") == f"#/run/{retry}"
