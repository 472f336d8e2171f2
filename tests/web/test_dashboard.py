"""The web dashboard in real headless Chromium against a real ``agentcanvas serve`` on loopback.

Browser: Debian's ``chromium`` (``apt-get install -y chromium``) at /usr/bin/chromium, driven by
Playwright; without it every test here is skipped. Two backends run per module, each in its own
tmp workspace: ``live`` runs real evals (a workspace copy of babyai_oracle with a simulated
step latency, so a run lasts a few seconds), ``big`` serves 200 synthetic but valid run folders
(EvalRun summaries, one with 1,000 episodes) to check that the pages stay responsive.

Screenshots go to ``test-artifacts/screenshots/`` and the measured load times to
``test-artifacts/dashboard-timings.json`` (repo root, git-ignored).
"""

from __future__ import annotations

import csv
import io
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentcanvas.eval import metrics
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json
from support.backend import Backend
from support.browser import (
    ARTIFACTS,
    CHROMIUM,
    NO_CHROMIUM,
    open_route,
    require_websocket_support,
    shot,
)
from support.polling import poll_until

sync_api = pytest.importorskip("playwright.sync_api")

RUN_DEADLINE_S = 90.0
STEP_LATENCY_MS = 120.0
TASKS = ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"]
N_FAKE_RUNS = 200
N_BIG_PER_TASK = 500  # 2 tasks → 1,000 episodes
PAGE_ROWS = 50
RENDER_BOUND_S = 15.0  # generous: this is a smoke bound, the measured times are reported

# Checked before any fixture, so no backend is started for nothing.
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)


# ---------------------------------------------------------------------------------------
# Real backend processes on loopback


def _builtin_graph(name: str) -> dict[str, Any]:
    text = resources.files("agentcanvas").joinpath(f"graphs/{name}.json").read_text()
    graph: dict[str, Any] = json.loads(text)
    return graph


@pytest.fixture(scope="module")
def live_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    workspace = tmp_path_factory.mktemp("live_ws")
    slow = _builtin_graph("babyai_oracle")
    slow["name"] = "babyai_slow"
    slow["env"]["fields"]["step_latency_ms"] = STEP_LATENCY_MS
    (workspace / "graphs").mkdir()
    (workspace / "graphs" / "babyai_slow.json").write_text(json.dumps(slow, indent=1))
    require_websocket_support()
    with Backend(workspace) as backend:
        yield backend


@pytest.fixture(scope="module")
def finished_runs(live_backend: Backend) -> dict[str, str]:
    """Three finished babyai_oracle runs: A with frames, B (tight step budget, so some
    episodes flip to failures), C (B's budget and another seed: two config differences)."""
    bodies = {
        "a": {"graph_name": "babyai_oracle", "episode_count": 3, "save_frames": True},
        "b": {"graph_name": "babyai_oracle", "episode_count": 3, "step_budget": 3},
        "c": {"graph_name": "babyai_oracle", "episode_count": 3, "step_budget": 3, "seed": 7},
    }
    ids = {
        key: live_backend.api("POST", "/api/eval/v2/start", json=body)["run_id"]
        for key, body in bodies.items()
    }
    finished = live_backend.wait_finished(list(ids.values()), RUN_DEADLINE_S)
    assert {s["status"] for s in finished.values()} == {"completed"}, finished
    return ids


# ---------------------------------------------------------------------------------------
# 200 synthetic runs, one of 1,000 episodes, written with the real models


def _fake_episodes(rng: random.Random, n_per_task: int) -> list[EpisodeResult]:
    records = []
    for index in range(n_per_task * len(TASKS)):
        task, episode_index = TASKS[index // n_per_task], index % n_per_task
        status = rng.choices(["completed", "timeout", "exception", "error"], [90, 4, 3, 3])[0]
        steps = rng.randint(2, 40)
        values: dict[str, float | int | bool | str | None] = {}
        if status == "completed":
            success = int(rng.random() < 0.7)
            values = {
                "success": success,
                "spl": success * rng.uniform(0.4, 1.0),
                "steps": steps - 1,
                "return": success * rng.uniform(0.3, 1.0),
            }
        records.append(
            EpisodeResult(
                index=index,
                episode_id=f"{task}/{episode_index}",
                task=task,
                episode_index=episode_index,
                seed=rng.randrange(2**31),
                status=status,
                steps=steps,
                metrics=values,
                error=None if status == "completed" else f"synthetic {status}",
            )
        )
    return records


def _write_fake_run(runs_dir: Path, run_id: str, n_per_task: int, rng: random.Random) -> None:
    episodes = _fake_episodes(rng, n_per_task)
    status = rng.choices(["completed", "failed", "cancelled", "aborted"], [85, 5, 5, 5])[0]
    started = datetime.strptime(run_id, "%Y%m%d_%H%M%S").timestamp()
    run = EvalRun(
        run_id=run_id,
        status=status,
        graph_name="babyai_oracle",
        config=EvalConfig(
            graph_name="babyai_oracle",
            episode_count=n_per_task,
            worker_count=rng.choice([1, 2, 4, 8]),
            seed=rng.randrange(100),
        ),
        episodes_total=len(episodes),
        episodes_done=len(episodes),
        aggregate_metrics=metrics.aggregate_metrics(episodes),
        aggregate_by_task=metrics.aggregate_by_task(episodes),
        status_counts=metrics.status_counts(episodes),
        episodes=episodes,
        timings={"started_at": started, "finished_at": started + rng.uniform(5, 900)},
        error="synthetic failure" if status == "failed" else None,
    )
    run_dir = RunDir(runs_dir / run_id)
    run_dir.create()
    atomic_write_json(run_dir.summary_path, run.model_dump(mode="json"))
    atomic_write_json(run_dir.graph_path, _builtin_graph("babyai_oracle"))
    run_dir.touch_done()


@dataclass
class BigWorkspace:
    backend: Backend
    big_run_id: str
    big_errors: int
    build_s: float


@pytest.fixture(scope="module")
def big_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BigWorkspace]:
    workspace = tmp_path_factory.mktemp("big_ws")
    runs_dir = workspace / "outputs" / "eval_runs"
    rng = random.Random(0)
    first = datetime(2020, 1, 1)
    ids = [(first + timedelta(minutes=i)).strftime("%Y%m%d_%H%M%S") for i in range(N_FAKE_RUNS)]
    big_run_id = ids[N_FAKE_RUNS // 2]  # not on the first page of the runs list
    built = time.perf_counter()
    for run_id in ids:
        _write_fake_run(runs_dir, run_id, N_BIG_PER_TASK if run_id == big_run_id else 5, rng)
    build_s = time.perf_counter() - built
    counts = json.loads((runs_dir / big_run_id / "summary.json").read_text())["status_counts"]
    errors = sum(n for status, n in counts.items() if status != "completed")
    backend = Backend(workspace)
    try:
        yield BigWorkspace(backend, big_run_id, errors, build_s)
    finally:
        backend.close()


# ---------------------------------------------------------------------------------------
# Browser


def record_ws_frames(page: Any) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []

    def on_socket(socket: Any) -> None:
        socket.on("framereceived", lambda payload: frames.append(json.loads(payload)))

    page.on("websocket", on_socket)
    return frames


def wait_run_state(locator: Any, backend: Backend, run_id: str) -> None:
    """Wait for a run's element to appear; on timeout, fail with the run's logs."""
    try:
        locator.wait_for(timeout=RUN_DEADLINE_S * 1000)
    except sync_api.TimeoutError as exc:
        raise AssertionError(f"{exc}\n{backend.diagnostics(run_id)}") from exc


# ---------------------------------------------------------------------------------------
# Tests


def test_start_run_from_form_and_watch_progress_live(live_backend: Backend, page: Any) -> None:
    frames = record_ws_frames(page)
    open_route(page, live_backend, "#/")
    page.wait_for_selector("#f-graph_name option[value='babyai_slow']", state="attached")
    page.select_option("#f-graph_name", "babyai_slow")
    page.fill("#f-episode_count", "4")
    page.fill("#f-worker_count", "1")
    page.click("#start-form button[type=submit]")
    run_id = page.get_attribute("#start-message [data-run-id]", "data-run-id")
    row = page.locator(f"#runs-table tr[data-run-id='{run_id}']")
    row.wait_for()
    handle = row.element_handle()
    samples = []  # (status, done, total, source) while the run lasts
    screenshot_taken = False
    deadline = time.monotonic() + RUN_DEADLINE_S
    while time.monotonic() < deadline:
        status = row.locator("[data-col=status]").inner_text()
        done, total, source = row.locator(".progress").evaluate(
            "b => [b.firstChild.value, b.firstChild.max, b.dataset.source]"
        )
        samples.append((status, done, total, source))
        if status == "running" and done > 0 and not screenshot_taken:
            shot(page, "01_runs_progress_live")
            screenshot_taken = True
        if status in ("completed", "failed", "cancelled", "aborted"):
            break
        time.sleep(0.1)
    assert samples[-1][0] == "completed", f"{samples[-3:]}\n{live_backend.diagnostics(run_id)}"
    running = [(done, source) for status, done, _, source in samples if status == "running"]
    advanced = sorted({done for done, _ in running})
    assert len(advanced) >= 2 and advanced[-1] > advanced[0], f"bar did not advance live: {running}"
    assert any(source == "ws" for _, source in running), "progress was not driven by the WebSocket"
    pushed = [f for f in frames if f.get("type") == "eval_progress" and f.get("run_id") == run_id]
    assert len(pushed) >= 2
    assert handle.evaluate("tr => tr.isConnected"), "the row was re-rendered instead of updated"
    assert samples[-1][1] == samples[-1][2] == 8  # 4 episodes × 2 tasks
    shot(page, "02_runs_after_live_run")


def test_bad_form_values_show_errors_next_to_field(live_backend: Backend, page: Any) -> None:
    starts: list[str] = []
    page.on("request", lambda r: starts.append(r.url) if r.url.endswith("/start") else None)
    open_route(page, live_backend, "#/")
    page.wait_for_selector("#f-graph_name option[value='babyai_oracle']", state="attached")
    page.select_option("#f-graph_name", "babyai_oracle")
    page.fill("#f-episode_count", "0")
    page.click("#start-form button[type=submit]")
    episodes_error = page.locator("[data-error-for=episode_count]")
    assert "at least 1" in episodes_error.inner_text()
    assert page.get_attribute("#f-episode_count", "aria-invalid") == "true"
    assert starts == [], "a client-side error must not reach the server"

    page.fill("#f-episode_count", "2")
    page.fill("#f-worker_count", "999")  # the server's limit (64) answers with a 422
    page.click("#start-form button[type=submit]")
    workers_error = page.locator("[data-error-for=worker_count]")
    workers_error.filter(has_text="64").wait_for()
    assert episodes_error.inner_text() == ""
    assert page.get_attribute("#f-worker_count", "aria-invalid") == "true"
    assert len(starts) == 1
    shot(page, "03_form_validation_errors")


def finished_runs_level(backend: Backend, run_id: str) -> str:
    """The run's determinism level as the server says it (the page shows it, never its own)."""
    status = httpx.get(f"{backend.url}/api/eval/v2/status/{run_id}", timeout=10).json()
    level: str = status["determinism"]["level"]
    return level


def test_finished_run_page(live_backend: Backend, finished_runs: dict[str, str], page: Any) -> None:
    run_a, run_b = finished_runs["a"], finished_runs["b"]
    open_route(page, live_backend, f"#/run/{run_a}")
    page.wait_for_selector("#aggregate-table tr[data-metric=success]")
    page.wait_for_selector("#episode-table tbody tr[data-index]")
    assert page.locator("#episode-table tbody tr[data-index]").count() == 6
    assert page.locator("svg.graph g.node").count() == 3
    assert page.locator("svg.graph path.edge.next").count() == 1  # nav.action → env.action
    assert page.locator("#task-chart svg .whisker").count() == 2
    level = page.locator("#determinism-level")
    assert level.get_attribute("data-level") == finished_runs_level(live_backend, run_a)
    assert level.get_attribute("data-level") in level.inner_text()
    assert page.locator("#run-health").inner_text().startswith("health: clean")
    for which in ("stdout", "stderr"):
        href = page.get_attribute(f".run-header a:text('{which}.log')", "href")
        assert httpx.get(live_backend.url + href, timeout=10).status_code == 200
    with page.expect_download() as download:  # a real download of the episodes CSV
        page.click(".run-header a[data-download='episodes.csv']")
    assert download.value.suggested_filename == f"{run_a}_episodes.csv"
    csv_text = Path(download.value.path()).read_text(encoding="utf-8")
    assert [r["index"] for r in csv.DictReader(io.StringIO(csv_text))] == list("012345")
    href = page.get_attribute(".run-header a[data-download='summary.json']", "href")
    assert len(httpx.get(live_backend.url + href, timeout=10).json()["episodes"]) == 6
    page.click("#episode-table button[data-sort=steps]")  # ascending
    page.click("#episode-table button[data-sort=steps]")  # descending
    page.wait_for_selector("#episode-table th[aria-sort=descending] button[data-sort=steps]")
    step_cells = page.locator("#episode-table tbody tr td:nth-child(6)")
    steps = [int(t) for t in step_cells.all_inner_texts()]
    assert steps == sorted(steps, reverse=True)
    shot(page, "04_run_page")

    open_route(page, live_backend, f"#/run/{run_b}")
    page.wait_for_selector("#episode-table tbody tr[data-index]")
    failures = int(page.locator(".stat.failure strong").inner_text())
    assert failures > 0 and page.locator(".stat.error strong").inner_text() == "0"
    page.click(".stat.failure")
    page.wait_for_function(
        "n => document.querySelectorAll('#episode-table tbody tr[data-outcome=failure]').length"
        " === n && document.querySelectorAll('#episode-table tbody tr').length === n",
        arg=failures,
    )
    shot(page, "05_run_page_task_failures")


def test_episode_frames_step_through(
    live_backend: Backend, finished_runs: dict[str, str], page: Any
) -> None:
    run_a = finished_runs["a"]
    record = live_backend.api("GET", f"/api/eval/v2/runs/{run_a}/episodes/0")
    assert record["assets"] == ["env.mp4"]  # recorded as video while the episode ran
    listing = live_backend.api("GET", f"/api/eval/v2/runs/{run_a}/episodes/0/frames")
    (view,) = listing["views"]
    n_frames = view["frames"]
    assert listing["main"] == view["view"] == "env" and n_frames >= 3

    def frame_url(k: int) -> str:  # one frame at a time, PNG from the video
        return f"/api/eval/v2/runs/{run_a}/episodes/0/frames/env/{k}"

    open_route(page, live_backend, f"#/run/{run_a}/episode/0")
    image = page.locator("img#frame")
    image.wait_for()
    assert image.get_attribute("src").endswith(frame_url(0))
    page.click("#frame-next")
    assert image.get_attribute("src").endswith(frame_url(1))
    assert page.locator("#frame-label").inner_text().startswith(f"frame 2/{n_frames}")
    page.wait_for_function("document.querySelector('img#frame').naturalWidth >= 256")
    page.focus("#frame-slider")
    page.keyboard.press("End")
    assert image.get_attribute("src").endswith(frame_url(n_frames - 1))
    page.click("#frame-prev")
    assert image.get_attribute("src").endswith(frame_url(n_frames - 2))
    page.wait_for_function(
        "document.querySelector('img#frame').complete"
        " && document.querySelector('img#frame').naturalWidth >= 256"
    )
    log_rows = page.locator("#log-table tbody tr")
    assert log_rows.count() == len(
        live_backend.api("GET", f"/api/eval/v2/runs/{run_a}/episodes/0/log")["records"]
    )
    current_step = int(page.locator("#frame-label").inner_text().rsplit("step ", 1)[1])
    highlighted = page.locator("#log-table tbody tr.current td:first-child").all_inner_texts()
    assert highlighted and {int(s) for s in highlighted} == {current_step}
    assert json.loads(page.locator("#episode-json").text_content())["index"] == 0
    shot(page, "06_episode_player")


def test_compare_two_runs(live_backend: Backend, finished_runs: dict[str, str], page: Any) -> None:
    run_a, run_b, run_c = finished_runs["a"], finished_runs["b"], finished_runs["c"]
    expected = live_backend.api("GET", f"/api/eval/v2/compare?a={run_a}&b={run_b}")
    assert expected["flips"], "a tight step budget should flip some successes"
    open_route(page, live_backend, "#/compare")
    page.wait_for_selector(f"#compare-a option[value='{run_a}']", state="attached")
    page.select_option("#compare-a", run_a)
    page.select_option("#compare-b", run_b)
    page.click("#compare-form button[type=submit]")
    page.wait_for_selector("#mcnemar")
    assert page.locator("#flips-table tbody tr[data-direction]").count() == len(expected["flips"])

    def cell(label: str) -> str:
        return str(page.locator("#mcnemar tr", has_text=label).locator("td").inner_text())

    assert cell("A succeeded, B failed") == str(expected["mcnemar"]["a_only"])
    assert cell("B succeeded, A failed") == str(expected["mcnemar"]["b_only"])
    assert cell("McNemar p-value") != "–"
    assert page.locator("#delta-table tbody tr").count() == len(expected["per_task"])
    assert page.locator("#config-warning").count() == 0  # save_frames differs too: no score effect
    assert "step_budget" in page.locator("#config-note").inner_text()
    assert "save_frames" in page.locator(".config-diff").inner_text()
    shot(page, "07_compare_one_difference")

    open_route(page, live_backend, f"#/compare?a={run_a}&b={run_c}")
    warning = page.locator("#config-warning")
    warning.wait_for()
    assert "seed" in warning.inner_text() and "step_budget" in warning.inner_text()
    shot(page, "08_compare_config_warning")


def test_cancel_resume_and_live_run_page(live_backend: Backend, page: Any) -> None:
    body = {"graph_name": "babyai_slow", "episode_count": 4, "worker_count": 1}
    run_id = live_backend.api("POST", "/api/eval/v2/start", json=body)["run_id"]
    open_route(page, live_backend, "#/")
    row = page.locator(f"#runs-table tr[data-run-id='{run_id}']")
    progress = row.locator(".progress")
    row.wait_for()
    first_done = "b => b.dataset.status === 'running' && b.firstChild.value >= 1"
    poll_until(
        lambda: progress.evaluate(first_done),
        "the first episode of the run",
        RUN_DEADLINE_S,
        explain=lambda: live_backend.diagnostics(run_id),
    )
    cancel = row.locator("button.cancel")
    cancel.click()
    assert cancel.inner_text() == "Really cancel?"  # a second click confirms
    cancel.click()
    wait_run_state(row.locator("[data-col=status] .st-cancelled"), live_backend, run_id)
    counts = live_backend.api("GET", f"/api/eval/v2/status/{run_id}?compact=true")["status_counts"]
    # Those finished count as done; the one in flight (if any) is a cancelled record; those
    # not started are left missing.
    assert 1 <= counts["completed"] < 8 and counts.get("cancelled", 0) <= 1, counts
    shot(page, "11_runs_cancelled")

    row.locator("button.resume").click()
    wait_run_state(row.locator(".progress[data-status=running]"), live_backend, run_id)
    open_route(page, live_backend, f"#/run/{run_id}")
    bar = page.locator(".run-header .progress")
    wait_run_state(page.locator(".run-header .status-slot .st-completed"), live_backend, run_id)
    assert bar.locator(".progress-text").inner_text() == "8/8"
    page.wait_for_function(  # the table follows the run to its end (eval_complete reloads it)
        "document.querySelectorAll('#episode-table tbody tr[data-outcome=success]').length === 8"
    )
    shot(page, "12_run_resumed_completed")


def test_pages_stay_responsive_with_200_runs_and_1000_episodes(
    big_backend: BigWorkspace, page: Any
) -> None:
    backend, big = big_backend.backend, big_backend.big_run_id
    timings: dict[str, float] = {"write_200_run_folders_s": big_backend.build_s}
    rows = "#runs-table tbody tr[data-run-id]"

    started = time.perf_counter()
    page.goto(f"{backend.url}/#/")
    page.wait_for_function(f"document.querySelectorAll('{rows}').length === {PAGE_ROWS}")
    timings["runs_list_first_page_s"] = time.perf_counter() - started
    assert "of 200" in page.locator("#runs-panel .pager-info").inner_text()
    first_id = page.get_attribute(rows, "data-run-id")
    started = time.perf_counter()
    page.click("#runs-panel button[aria-label='next page']")
    page.wait_for_function(
        f"document.querySelector('{rows}').dataset.runId !== '{first_id}'"
        f" && document.querySelectorAll('{rows}').length === {PAGE_ROWS}"
    )
    timings["runs_list_next_page_s"] = time.perf_counter() - started
    shot(page, "09_runs_200")

    episode_rows = "#episode-table tbody tr[data-index]"
    started = time.perf_counter()
    page.goto(f"{backend.url}/#/run/{big}")
    page.wait_for_function(f"document.querySelectorAll('{episode_rows}').length === {PAGE_ROWS}")
    page.wait_for_selector("#aggregate-table tr[data-metric=success]")
    timings["run_1000_episodes_first_page_s"] = time.perf_counter() - started
    assert "of 1000" in page.locator("#episodes-panel .pager-info").inner_text()
    started = time.perf_counter()
    page.click("#episodes-panel button[aria-label='last page']")
    page.wait_for_function(f"document.querySelector('{episode_rows}').dataset.index === '950'")
    timings["run_1000_episodes_last_page_s"] = time.perf_counter() - started
    page.select_option("#episode-filter", "outcome:error")
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length === n"
        " && [...document.querySelectorAll(sel)].every(r => r.dataset.outcome === 'error')",
        arg=[episode_rows, min(PAGE_ROWS, big_backend.big_errors)],
    )
    assert f"({big_backend.big_errors} matching" in page.locator("#episodes-panel h2").inner_text()
    shot(page, "10_run_1000_episodes_errors")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "dashboard-timings.json").write_text(json.dumps(timings, indent=1) + "\n")
    print("dashboard timings:", json.dumps(timings))
    pages = {k: v for k, v in timings.items() if k != "write_200_run_folders_s"}
    slow = {k: v for k, v in pages.items() if v > RENDER_BOUND_S}
    assert not slow, f"pages took longer than {RENDER_BOUND_S} s: {slow}"
