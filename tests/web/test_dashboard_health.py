"""The dashboard's health, names and episodes views in real Chromium against a real backend.

One ``agentcanvas serve`` per module, on a workspace with node sets that raise
(support.truth_workspace) and a slow copy of babyai_oracle: a run whose every episode raised
looks unhealthy in the list and on its page; names and tags set with ``agentcanvas submit``
show, search and filter, and edit; the episode table filters by task, the run page draws
per-task histograms and the effective step budget; the live run page keeps its episode count
in step with its progress; a run cancelled part-way shows its cancelled and unstarted
episodes apart from errors, and every rate's coverage ("n = 2 of 12"). Screenshots go to
``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

from agentcanvas.eval.config import EvalConfig, EvalRun
from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, open_route, shot
from support.cli import run_cli
from support.polling import poll_until
from support.truth_workspace import write_truth_workspace

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)

RUN_DEADLINE_S = 90.0
CLI_TIMEOUT_S = 60.0
SLOW_LATENCY_MS = 150.0
TASKS = ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"]


def _slow_oracle() -> str:
    graph = json.loads(
        resources.files("agentcanvas").joinpath("graphs/babyai_oracle.json").read_text()
    )
    graph["name"] = "babyai_slow"
    graph["env"]["fields"]["step_latency_ms"] = SLOW_LATENCY_MS
    return json.dumps(graph)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    workspace = write_truth_workspace(tmp_path_factory.mktemp("health_ws"))
    (workspace / "graphs" / "babyai_slow.json").write_text(_slow_oracle())
    with Backend(workspace) as backend:
        yield backend


@pytest.fixture(scope="module")
def runs(backend: Backend) -> dict[str, str]:
    """The finished runs the tests look at, queued together so that they run side by side:
    ``raises`` (every episode raises), ``walk`` (clean), ``babyai_oracle`` (two tasks)."""
    ids = {
        "broken": backend.start_run("raises", 3, 1),
        "clean": backend.start_run("walk", 3, 1),
        "oracle": backend.start_run("babyai_oracle", 2, 2),
    }
    for run_id in ids.values():
        backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
    return ids


def test_a_run_whose_every_episode_raised_looks_unhealthy(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    broken, clean = runs["broken"], runs["clean"]
    summary = backend.status(broken)
    assert summary["health"]["verdict"] == "errors" and summary["status_counts"] == {"error": 3}

    open_route(page, backend, "#/")
    row = page.locator(f"#runs-table tr[data-run-id='{broken}']")
    row.locator("[data-col=health] .badge[data-verdict=errors]").wait_for()
    assert row.locator("[data-col=health]").inner_text() == "3 errors"
    bar = row.locator(".progress")
    assert bar.get_attribute("data-all-errors") == "true"
    assert "3 errors" in bar.inner_text()
    assert row.locator(".seg.err").evaluate("s => s.getBoundingClientRect().width") > 50
    assert row.locator(".seg.ok").evaluate("s => s.getBoundingClientRect().width") == 0
    assert row.locator("[data-col=success]").inner_text() == "– (no verdicts)"
    good = page.locator(f"#runs-table tr[data-run-id='{clean}']")
    assert good.locator(".badge[data-verdict=clean]").count() == 1
    assert "(n = 3 of 3)" in good.locator("[data-col=success]").inner_text()
    shot(page, "health_01_runs_list_all_errors")

    open_route(page, backend, f"#/run/{broken}")
    page.locator(".run-header.unhealthy #header-health [data-verdict=errors]").wait_for()
    assert (
        "No episode completed: 3 ended in error" in page.locator("#aggregates-panel").inner_text()
    )
    assert page.locator(".stat.error strong").inner_text() == "3"
    assert page.locator(".stat.completed strong").inner_text() == "0"
    assert page.locator("#run-health").inner_text() == (
        f"health: errors {summary['health']['reason']}"  # the server's words, as served
    )
    page.wait_for_selector("#episode-table tbody tr[data-outcome=error]")
    assert page.locator("#episode-table tbody tr[data-outcome=error]").count() == 3
    shot(page, "health_02_run_page_all_errors")

    open_route(page, backend, f"#/run/{clean}")
    page.locator("#header-health [data-verdict=clean]").wait_for()
    assert page.locator(".run-header.unhealthy").count() == 0
    row_n = page.locator("#aggregate-table tr[data-metric=success] td").nth(3).inner_text()
    assert row_n == "n = 3 of 3"


def test_names_and_tags_from_the_cli_show_filter_and_edit(backend: Backend, page: Any) -> None:
    args = ["--url", backend.url, "-n", "2"]
    named = run_cli(
        "submit",
        "walk",
        *args,
        "--name",
        "cli walk",
        "--tag",
        "cli",
        "--tag",
        "tenv",
        "--note",
        "queued from the CLI",
        workspace=backend.workspace,
        timeout_s=CLI_TIMEOUT_S,
    )
    assert named.returncode == 0, named.stderr
    bad = run_cli(
        "submit",
        "walk",
        *args,
        "--tag",
        "no spaces",
        workspace=backend.workspace,
        timeout_s=CLI_TIMEOUT_S,
    )
    assert bad.returncode == 1 and "--tag" in bad.stderr
    named_id = json.loads(named.stdout)["run_id"]

    open_route(page, backend, "#/")  # the other run is queued from the start form
    page.wait_for_selector("#f-graph_name option[value='walk']", state="attached")
    page.select_option("#f-graph_name", "walk")
    page.fill("#f-episode_count", "2")
    page.fill("#f-step_budget", "4")
    page.fill("#f-name", "form walk")
    page.fill("#f-tags", "tenv, form")
    page.fill("#f-note", "queued from the form")
    page.click("#start-form button[type=submit]")
    tight_id = page.get_attribute("#start-message [data-run-id]", "data-run-id")
    for run_id in (named_id, tight_id):
        backend.wait_status(run_id, "completed")
    assert json.loads((backend.run_dir(tight_id) / "meta.json").read_text()) == {
        "name": "form walk",
        "tags": ["tenv", "form"],
        "note": "queued from the form",
    }
    page.reload()
    row = page.locator(f"#runs-table tr[data-run-id='{named_id}']")
    row.wait_for()
    assert row.locator(".run-link").inner_text() == "cli walk"
    assert row.locator(".tag").all_inner_texts() == ["cli", "tenv"]
    assert row.locator(".run-label").get_attribute("title") == "queued from the CLI"
    # Runs of walk differ in step budget (and, with the first test's, in episode count).
    assert "step_budget" in page.locator("#runs-table thead th.diff").all_inner_texts()
    tight_cell = page.locator(
        f"#runs-table tr[data-run-id='{tight_id}'] td[data-col='diff:step_budget']"
    )
    assert tight_cell.inner_text() == "4"

    assert page.locator(f"#runs-table tr[data-run-id='{tight_id}'] .run-link").inner_text() == (
        "form walk"
    )
    page.fill("#runs-search", "cli walk")
    page.wait_for_function(
        "id => [...document.querySelectorAll('#runs-table tbody tr[data-run-id]')]"
        ".map(r => r.dataset.runId).join() === id",
        arg=named_id,
    )
    page.fill("#runs-search", "")
    page.wait_for_selector(f"#runs-table tr[data-run-id='{tight_id}']")
    page.select_option("#runs-tag", "cli")
    page.wait_for_function(
        "id => [...document.querySelectorAll('#runs-table tbody tr[data-run-id]')]"
        ".map(r => r.dataset.runId).join() === id",
        arg=named_id,
    )
    # Filtered to one run, the columns still say how it differs from its graph's other runs.
    assert "step_budget" in page.locator("#runs-table thead th.diff").all_inner_texts()
    shot(page, "health_03_runs_filtered_by_tag")

    open_route(page, backend, f"#/run/{named_id}")
    page.wait_for_function("document.querySelector('.run-header h1').textContent === 'cli walk'")
    assert page.locator("#run-note").inner_text() == "queued from the CLI"
    spec_before = (backend.run_dir(named_id) / "spec.json").read_bytes()
    page.click("#meta-edit")
    page.fill("#meta-name", "walk, renamed")
    page.fill("#meta-tags", "cli, edited")
    page.click("#meta-form button[type=submit]")
    page.wait_for_function(
        "document.querySelector('.run-header h1').textContent === 'walk, renamed'"
    )
    assert page.locator("#run-meta .tag").all_inner_texts() == ["cli", "edited"]
    assert (backend.run_dir(named_id) / "spec.json").read_bytes() == spec_before
    meta = json.loads((backend.run_dir(named_id) / "meta.json").read_text())
    assert meta["name"] == "walk, renamed" and meta["tags"] == ["cli", "edited"]
    shot(page, "health_04_run_page_name_tags_note")


def test_task_filter_histograms_and_effective_step_budget(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    run_id = runs["oracle"]
    summary = backend.status(run_id)
    assert summary["config"]["step_budget"] is None
    budget = summary["episodes"][0]["step_budget"]

    open_route(page, backend, f"#/run/{run_id}")
    page.wait_for_selector("#episode-table tbody tr[data-index]")
    assert page.locator("#effective-step-budget").inner_text().startswith(f"{budget} ")
    page.wait_for_selector(f"#episode-task option[value='{TASKS[1]}']", state="attached")
    page.select_option("#episode-task", TASKS[1])
    page.wait_for_function(
        "task => { const rows = [...document.querySelectorAll('#episode-table tbody tr')];"
        " return rows.length === 2 && rows.every(r => r.children[1].textContent === task); }",
        arg=TASKS[1],
    )
    assert f"matching {TASKS[1]}" in page.locator("#episodes-panel h2").inner_text()
    # The record's graph steps and the env's steps metric are labelled, and differ by one.
    heads = page.locator("#episode-table thead th").all_inner_texts()
    assert "Graph steps" in heads and "steps (env actions)" in heads
    graph_steps = page.locator("#episode-table tbody tr td:nth-child(6)").all_inner_texts()
    env_col = heads.index("steps (env actions)") + 1
    env_steps = page.locator(f"#episode-table tbody tr td:nth-child({env_col})").all_inner_texts()
    assert [int(g) - int(e) for g, e in zip(graph_steps, env_steps, strict=True)] == [1, 1]
    assert page.locator("#steps-note").is_visible()

    histograms = page.locator("#histogram-table tbody tr")
    assert sorted(histograms.evaluate_all("rows => rows.map(r => r.dataset.task)")) == sorted(TASKS)
    assert page.locator("#histogram-table svg.histogram").count() == 4
    ns = page.locator("#histogram-table svg.histogram").evaluate_all(
        "svgs => svgs.map(s => Number(s.dataset.n))"
    )
    assert ns == [2, 2, 2, 2]
    # Each bar is labelled with its count, the axis with the bins' values: no "max" label.
    first = page.locator("#histogram-table svg.histogram").first
    bars = first.locator("rect.bar").evaluate_all("rs => rs.map(r => Number(r.dataset.count))")
    counts = [int(t) for t in first.locator("text.count").all_text_contents()]
    assert counts == [n for n in bars if n] and sum(counts) == 2
    assert first.locator("text.bin").count() >= 2
    assert not any(t.startswith("max") for t in first.locator("text").all_text_contents())
    page.click(f"#task-table .task-link[data-task='{TASKS[0]}']")  # a per-task row filters too
    page.wait_for_function(
        "task => document.querySelector('#episode-task').value === task && [...document"
        ".querySelectorAll('#episode-table tbody tr')].every(r => r.children[1].textContent"
        " === task)",
        arg=TASKS[0],
    )
    page.select_option("#episode-task", TASKS[1])
    page.wait_for_function(
        "task => [...document.querySelectorAll('#episode-table tbody tr')]"
        ".every(r => r.children[1].textContent === task)",
        arg=TASKS[1],
    )
    shot(page, "health_05_task_filter_and_histograms")


def _live_sample(page: Any) -> dict[str, Any]:
    return dict(
        page.evaluate(
            """() => {
          const heading = document.querySelector('#episodes-panel h2');
          const bar = document.querySelector('.run-header .progress');
          return { listed: heading?.dataset.total ?? null, status: bar?.dataset.status ?? '',
                   done: bar ? bar.querySelector('progress').value : null,
                   text: bar?.querySelector('.progress-text').textContent ?? '' };
        }"""
        )
    )


def test_the_live_run_page_keeps_its_episode_count_in_step(backend: Backend, page: Any) -> None:
    run_id = backend.start_run("babyai_slow", 4, 1)
    open_route(page, backend, f"#/run/{run_id}")
    samples: list[dict[str, Any]] = []
    shot_taken = False
    deadline = time.monotonic() + RUN_DEADLINE_S
    while time.monotonic() < deadline:
        sample = _live_sample(page)
        samples.append(sample)
        if not shot_taken and sample["status"] == "running" and sample["done"]:
            shot(page, "health_06_live_run_page")
            shot_taken = True
        if sample["status"] == "completed":
            break
        time.sleep(0.1)
    running = [s for s in samples if s["status"] == "running" and s["listed"] is not None]
    assert running, f"never saw the run running: {samples[-3:]}\n{backend.log()[-2000:]}"
    out_of_step = [s for s in running if int(s["listed"]) != s["done"]]
    assert not out_of_step, out_of_step[:5]
    assert len({s["done"] for s in running}) >= 2, "the count did not advance live"
    page.wait_for_function(
        "document.querySelector('#episodes-panel h2').dataset.total === '8'"
        " && document.querySelector('.run-header .progress-text').textContent === '8/8'"
    )


EARLY_EPISODES = 6  # per task: 12 planned, cancelled after CANCEL_AFTER have ended
CANCEL_AFTER = 2
ERROR_STATUSES = ("error", "exception", "timeout", "no_verdict")


def _cancelled_early(backend: Backend) -> dict[str, Any]:
    """A slow run cancelled through the API once CANCEL_AFTER episodes have ended; its
    summary."""
    run_id = backend.start_run("babyai_slow", EARLY_EPISODES, 1)
    poll_until(
        lambda: (
            backend.api("GET", f"/api/eval/v2/status/{run_id}", params={"compact": True})[
                "episodes_done"
            ]
            >= CANCEL_AFTER
        ),
        f"{CANCEL_AFTER} episodes of {run_id}",
        RUN_DEADLINE_S,
        explain=lambda: backend.diagnostics(run_id),
    )
    backend.cancel(run_id)
    return backend.wait_status(run_id, "cancelled", RUN_DEADLINE_S)


def test_a_run_cancelled_early_shows_cancellations_apart_from_errors_and_its_coverage(
    backend: Backend, page: Any
) -> None:
    summary = _cancelled_early(backend)
    run_id, total, counts = summary["run_id"], summary["episodes_total"], summary["status_counts"]
    completed = counts.get("completed", 0)
    assert total == EARLY_EPISODES * len(TASKS) and CANCEL_AFTER <= completed < total, counts
    assert not any(counts.get(s) for s in ERROR_STATUSES), counts
    assert summary["health"]["verdict"] == "cancelled" and summary["health"]["error_count"] == 0
    assert summary["aggregate_metrics"]["success"]["n"] == completed
    coverage = f"n = {completed} of {total}"

    open_route(page, backend, "#/")
    row = page.locator(f"#runs-table tr[data-run-id='{run_id}']")
    row.locator("[data-col=status] .st-cancelled").wait_for()
    assert row.locator("[data-col=health] .badge[data-verdict=cancelled]").inner_text() == (
        "cancelled"
    )
    bar = row.locator(".progress")
    assert bar.get_attribute("data-errors") == "0"
    assert bar.get_attribute("data-all-errors") == "false"
    assert "error" not in bar.inner_text()
    assert bar.locator(".progress-text").inner_text().startswith(f"{completed}/{total}")
    assert row.locator(".seg.err").evaluate("s => s.getBoundingClientRect().width") == 0
    assert f"({coverage})" in row.locator("[data-col=success]").inner_text()
    assert row.locator("button.resume").count() == 1  # episodes are left to run
    shot(page, "health_07_runs_list_cancelled_early")

    open_route(page, backend, f"#/run/{run_id}")
    page.wait_for_selector("#episode-table tbody tr[data-index]")
    assert page.locator("#run-health").inner_text().startswith("health: cancelled")
    assert page.locator(".run-header.unhealthy").count() == 0
    assert page.locator(".stat.error strong").inner_text() == "0"
    assert page.locator(".error-breakdown").count() == 0
    assert page.locator(".stat.completed strong").inner_text() == str(completed)
    in_flight = counts.get("cancelled", 0)  # the episode running when the cancel came
    if in_flight:
        assert page.locator(".stat.cancelled strong").inner_text() == str(in_flight)
    not_run = total - completed - in_flight
    assert page.locator(".stat.not-run strong").inner_text() == str(not_run)
    assert f"({coverage})" in page.locator(".stat.success").inner_text()
    row_n = page.locator("#aggregate-table tr[data-metric=success] td").nth(3).inner_text()
    assert row_n == coverage
    assert page.locator("#episode-table tbody tr[data-outcome=error]").count() == 0
    if in_flight:  # its record says why it stopped, not in an error's red
        cancelled_row = page.locator("#episode-table tbody tr[data-outcome=cancelled]")
        assert cancelled_row.locator("td.error-text").count() == 0
        assert cancelled_row.locator("td.muted", has_text="cancelled with the run").count() == 1
    for task in TASKS:  # every planned task has its coverage, those never reached too
        n_task = summary["aggregate_by_task"].get(task, {}).get("success", {}).get("n", 0)
        cell = page.locator(f"#task-table tr[data-task='{task}'] td").first
        cell.filter(has_text=f"n = {n_task} of {EARLY_EPISODES}").wait_for()
    success = summary["aggregate_metrics"]["success"]
    task_failures = completed - round(success["mean"] * success["n"])
    videos = page.locator("#failure-videos-panel")
    if task_failures:  # the cancelled episode is not one of the failures
        videos.get_by_text(f"{task_failures} episode(s) did not succeed").wait_for()
    else:
        videos.get_by_text("no failure to show").wait_for()
    shot(page, "health_08_run_page_cancelled_early")


def test_the_pages_show_the_servers_verdict_not_their_own(
    backend: Backend, runs: dict[str, str], page: Any
) -> None:
    """A folder written before the backend said ``completed`` for a run cancelled after its
    last episode: its summary is a real finished run's, with the status and verdict a cancel
    that came too late used to leave. The page once re-derived "completed" and "clean" from
    the counts; it shows what the server serves (and offers no resume: nothing is left)."""
    finished = runs["clean"]
    late = "20200101_000001"
    shutil.copytree(backend.run_dir(finished), backend.run_dir(late))
    summary_path = backend.run_dir(late) / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary.update(run_id=late, status="cancelled")
    reason = "the run is cancelled (after its last episode)"
    summary["health"] = {"verdict": "cancelled", "error_count": 0, "reason": reason}
    summary_path.write_text(json.dumps(summary))
    served = backend.status(late)
    assert served["health"]["verdict"] == "cancelled" and served["episodes_done"] == 3

    open_route(page, backend, "#/")
    row = page.locator(f"#runs-table tr[data-run-id='{late}']")
    row.locator("[data-col=status] .st-cancelled").wait_for()
    health = row.locator("[data-col=health] .badge")
    assert health.get_attribute("data-verdict") == "cancelled"
    assert health.get_attribute("title") == reason
    assert row.locator("button.resume").count() == 0
    open_route(page, backend, f"#/run/{late}")
    page.locator(".run-header .status-slot .st-cancelled").wait_for()
    assert page.locator(".run-header button.resume").count() == 0
    assert page.locator("#run-health").inner_text() == f"health: cancelled {reason}"
    assert page.locator("#header-health [data-verdict=cancelled]").count() == 1
    assert page.locator(".run-header .progress-text").inner_text() == "3/3"


def test_a_damaged_run_and_an_aborted_runs_reason_show_in_the_list(
    backend: Backend, page: Any
) -> None:
    """A run folder whose summary.json is garbage is listed as damaged, naming the file; a
    run that ended on a full disk shows why beside its status."""
    runs_dir = backend.workspace / "outputs" / "eval_runs"
    damaged = runs_dir / "20190101_000000"
    damaged.mkdir(parents=True)
    (damaged / "summary.json").write_text("{not json")
    aborted = runs_dir / "20190101_000001"
    aborted.mkdir()
    reason = "disk full: cannot write 'summary.json': No space left on device"
    summary = EvalRun(
        run_id=aborted.name,
        status="aborted",
        error=reason,
        graph_name="walk",
        config=EvalConfig(graph_name="walk", episode_count=3),
        episodes_total=3,
    )
    (aborted / "summary.json").write_text(summary.model_dump_json())

    open_route(page, backend, "#/")
    row = page.locator(f"#runs-table tr[data-run-id='{damaged.name}']")
    row.locator(".status-why").wait_for()
    assert "damaged" in row.locator("[data-col=status]").inner_text()
    assert "summary.json" in row.locator(".status-why").inner_text()
    why = page.locator(f"#runs-table tr[data-run-id='{aborted.name}'] .status-why")
    assert why.inner_text() == reason and why.get_attribute("title") == reason
    shot(page, "health_07_damaged_and_aborted_reasons")
