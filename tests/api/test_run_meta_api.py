"""Runs you can tell apart, over a real backend: name/tags/note set at start, edited with
PATCH (strict, 4xx naming the field), stored in ``meta.json`` without touching the spec,
searched and filtered in the listing; config fields that differ between runs of one graph;
the effective step budget and per-task histograms of a finished run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.api.episode_stats import histogram
from agentcanvas.api.runs import compare_runs, episodes_page
from support.backend import Backend
from support.truth_workspace import write_truth_workspace

RUNS = "/api/eval/v2/runs"


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(write_truth_workspace(tmp_path_factory.mktemp("meta_ws"))) as backend:
        yield backend


@pytest.fixture(scope="module")
def runs(backend: Backend) -> dict[str, str]:
    """Two finished runs of ``walk`` that differ in step budget, the first named and tagged."""
    named = backend.start_run(
        "walk", 2, 1, name="walk base", tags=["baseline", "tenv"], note="first try"
    )
    other = backend.start_run("walk", 2, 1, step_budget=4, tags=["tenv"])
    for run_id in (named, other):
        backend.wait_status(run_id, "completed")
    return {"named": named, "other": other}


def listing(backend: Backend, **params: Any) -> dict[str, Any]:
    response = backend.http.get(RUNS, params=params)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_start_meta_is_stored_in_the_run_folder_and_listed(
    backend: Backend, runs: dict[str, str]
) -> None:
    run_id = runs["named"]
    meta = backend.http.get(f"{RUNS}/{run_id}/meta").json()
    assert meta == {"name": "walk base", "tags": ["baseline", "tenv"], "note": "first try"}
    assert (backend.run_dir(run_id) / "meta.json").is_file()
    row = next(r for r in listing(backend)["runs"] if r["run_id"] == run_id)
    assert (row["name"], row["tags"], row["note"]) == (
        "walk base",
        ["baseline", "tenv"],
        "first try",
    )
    assert row["health"]["verdict"] == "clean"
    unnamed = next(r for r in listing(backend)["runs"] if r["run_id"] == runs["other"])
    assert unnamed["name"] is None and unnamed["tags"] == ["tenv"]


def test_patch_edits_meta_without_rewriting_the_spec(
    backend: Backend, runs: dict[str, str]
) -> None:
    run_id = runs["named"]
    spec = backend.run_dir(run_id) / "spec.json"
    before = spec.read_bytes()
    response = backend.http.patch(
        f"{RUNS}/{run_id}/meta", json={"name": "walk renamed", "tags": ["v2", "tenv"]}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "walk renamed", "tags": ["v2", "tenv"], "note": "first try"}
    cleared = backend.http.patch(f"{RUNS}/{run_id}/meta", json={"note": None}).json()
    assert cleared["note"] is None and cleared["name"] == "walk renamed"
    assert spec.read_bytes() == before
    assert [r["run_id"] for r in listing(backend, q="RENAMED")["runs"]] == [run_id]
    assert [r["run_id"] for r in listing(backend, tag="v2")["runs"]] == [run_id]
    both = {r["run_id"] for r in listing(backend, tag="tenv")["runs"]}
    assert both == {run_id, runs["other"]}
    assert listing(backend, q="renamed", tag="baseline")["total"] == 0
    assert {"v2", "tenv"} <= set(listing(backend)["tags"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tags": ["has space"]}, "tags.0"),
        ({"name": 5}, "name"),
        ({"name": ""}, "name"),
        ({"colour": "red"}, "colour"),
        ({"note": "x" * 4001}, "note"),
        ({"tags": "baseline"}, "tags"),
    ],
)
def test_a_bad_patch_is_a_422_naming_the_field(
    backend: Backend, runs: dict[str, str], body: dict[str, Any], field: str
) -> None:
    run_id = runs["other"]
    before = backend.http.get(f"{RUNS}/{run_id}/meta").json()
    response = backend.http.patch(f"{RUNS}/{run_id}/meta", json=body)
    assert response.status_code == 422, response.text
    assert field in [p["field"] for p in response.json()["problems"]]
    assert backend.http.get(f"{RUNS}/{run_id}/meta").json() == before


def test_patch_refuses_invalid_json_and_unknown_runs(backend: Backend) -> None:
    bad = backend.http.patch(
        f"{RUNS}/20200101_000000/meta",
        content=b'{"name": NaN}',
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 422, bad.text
    missing = backend.http.patch(f"{RUNS}/20200101_000000/meta", json={"name": "x"})
    assert missing.status_code == 404 and "20200101_000000" in missing.json()["detail"]
    assert backend.http.get(f"{RUNS}/not-a-run/meta").status_code == 422
    other = backend.http.request("DELETE", f"{RUNS}/20200101_000000/meta")
    assert other.status_code == 405 and other.headers["allow"] == "GET, PATCH"


def test_a_bad_tag_at_start_queues_nothing(backend: Backend) -> None:
    before = listing(backend)["total"]
    response = backend.http.post(
        "/api/eval/v2/start", json={"graph_name": "walk", "tags": ["ok", "no way"]}
    )
    assert response.status_code == 422
    assert "tags.1" in [p["field"] for p in response.json()["problems"]]
    assert listing(backend)["total"] == before


def test_differing_config_fields_are_listed_per_graph(
    backend: Backend, runs: dict[str, str]
) -> None:
    rows = {r["run_id"]: r for r in listing(backend, tag="tenv")["runs"]}
    assert rows[runs["named"]]["config_diff"] == {"step_budget": None}
    assert rows[runs["other"]]["config_diff"] == {"step_budget": 4}


def test_distributions_and_the_effective_step_budget(
    backend: Backend, runs: dict[str, str]
) -> None:
    summary = backend.status(runs["named"])
    steps = sorted(e["steps"] for e in summary["episodes"])
    data = backend.http.get(f"{RUNS}/{runs['named']}/distributions").json()
    assert summary["config"]["step_budget"] is None
    assert data["step_budgets"] == sorted({e["step_budget"] for e in summary["episodes"]})
    hist = data["tasks"]["walk"]["steps"]
    assert sum(hist["counts"]) == hist["n"] == len(steps) == 2
    assert hist["edges"][0] == steps[0] and hist["edges"][-1] >= steps[-1]
    assert data["tasks"]["walk"]["return"] is None  # tenv has no return metric


def test_histogram_bins_whole_numbers_and_floats() -> None:
    assert histogram([]) is None
    ints = histogram([3, 3, 4, 6])
    assert ints is not None and ints["edges"] == [3, 4, 5, 6, 7] and ints["counts"] == [2, 1, 0, 1]
    floats = histogram([0.0, 0.25, 0.5, 1.0])
    assert floats is not None and sum(floats["counts"]) == 4 and floats["edges"][-1] == 1.0
    assert floats["counts"][-1] >= 1  # the maximum falls in the last bin


def test_episodes_filter_by_task_and_keep_cancelled_apart_from_errors() -> None:
    episodes = [
        {"index": 0, "task": "a", "status": "completed", "metrics": {"success": 1}},
        {"index": 1, "task": "b", "status": "exception", "metrics": {}},
        {"index": 2, "task": "a", "status": "cancelled", "metrics": {}},
        {"index": 3, "task": "b", "status": "completed", "metrics": {"success": 0}},
    ]
    summary = {"episodes": episodes}
    page = episodes_page(summary, 0, 10, None, "index:asc", task="a")
    assert [e["index"] for e in page["episodes"]] == [0, 2]
    errors = episodes_page(summary, 0, 10, None, "index:asc", outcome="error")
    assert [e["index"] for e in errors["episodes"]] == [1]
    cancelled = episodes_page(summary, 0, 10, None, "index:asc", outcome="cancelled", task="a")
    assert [e["index"] for e in cancelled["episodes"]] == [2]


def test_episodes_sort_by_a_metric_in_number_order_and_carry_their_outcome() -> None:
    values = [0.5, None, 2, True, 0.5, "high", float("nan"), -1]
    episodes = [
        {"index": i, "task": "a", "status": "completed", "metrics": {"return": v}}
        for i, v in enumerate(values)
    ]
    episodes[1] = {"index": 1, "task": "a", "status": "timeout", "metrics": {}}
    summary = {"episodes": episodes}
    up = episodes_page(summary, 0, 10, None, "metric.return:asc")["episodes"]
    down = episodes_page(summary, 0, 10, None, "metric.return:desc")["episodes"]
    # numbers in order (the two 0.5 in index order either way), the rest last, by index
    assert [e["index"] for e in up] == [7, 0, 4, 3, 2, 1, 5, 6]
    assert [e["index"] for e in down] == [2, 3, 0, 4, 7, 1, 5, 6]
    outcomes = {e["index"]: e["outcome"] for e in up}
    assert outcomes[1] == "error" and outcomes[0] is None  # no success metric: no verdict


def test_the_episodes_route_sorts_by_a_metric_and_refuses_a_bad_sort(
    backend: Backend, runs: dict[str, str]
) -> None:
    url = f"{RUNS}/{runs['named']}/episodes"
    page = backend.http.get(url, params={"sort": "metric.success:desc"})
    assert page.status_code == 200, page.text
    assert all(e["outcome"] in ("success", "failure") for e in page.json()["episodes"])
    bad = backend.http.get(url, params={"sort": "metric.:up"})
    assert bad.status_code == 422 and "sort" in bad.text
    record = backend.http.get(f"{url}/0").json()
    assert record["outcome"] in ("success", "failure")


def test_the_listing_filters_by_graph_and_names_every_graph(
    backend: Backend, runs: dict[str, str]
) -> None:
    walk = listing(backend, graph="walk")
    assert {runs["named"], runs["other"]} <= {r["run_id"] for r in walk["runs"]}
    assert all(r["graph_name"] == "walk" for r in walk["runs"])
    assert listing(backend, graph="no_such_graph")["total"] == 0
    assert "walk" in listing(backend)["graphs"]


def test_the_leaderboard_names_its_runs(backend: Backend, runs: dict[str, str]) -> None:
    ids = f"{runs['named']},{runs['other']}"
    board = backend.http.get("/api/eval/v2/leaderboard", params={"runs": ids}).json()
    rows = {r["run_id"]: r for r in board["runs"]}
    meta = backend.http.get(f"{RUNS}/{runs['named']}/meta").json()
    assert (rows[runs["named"]]["name"], rows[runs["named"]]["tags"]) == (
        meta["name"],
        meta["tags"],
    )
    assert rows[runs["other"]]["name"] is None and rows[runs["other"]]["tags"] == ["tenv"]


def test_the_comparison_says_whether_mcnemar_is_significant_at_its_alpha() -> None:
    def run(run_id: str, successes: list[int]) -> dict[str, Any]:
        episodes = [
            {"index": i, "task": "t", "episode_index": i, "status": "completed",
             "metrics": {"success": s}}
            for i, s in enumerate(successes)
        ]  # fmt: skip
        return {"run_id": run_id, "config": {"seed": 0}, "episodes": episodes}

    apart = compare_runs(run("a", [1] * 10), run("b", [0] * 10))["mcnemar"]
    assert apart["alpha"] == 0.05 and apart["p_value"] < 0.01 and apart["significant"] is True
    alike = compare_runs(run("a", [1, 0] * 5), run("b", [0, 1] * 5))["mcnemar"]
    assert alike["p_value"] > 0.05 and alike["significant"] is False


def test_the_task_query_parameter_reaches_the_filter(
    backend: Backend, runs: dict[str, str]
) -> None:
    url = f"{RUNS}/{runs['named']}/episodes"
    assert backend.http.get(url, params={"task": "walk"}).json()["total"] == 2
    assert backend.http.get(url, params={"task": "nope"}).json()["total"] == 0


def test_meta_file_survives_a_damaged_copy(tmp_path: Path) -> None:
    from agentcanvas.eval.run_meta import MetaPatch, read_meta, update_meta

    (tmp_path / "meta.json").write_text("{not json")
    assert read_meta(tmp_path).name is None
    meta = update_meta(tmp_path, MetaPatch(name="fixed"))
    assert meta.name == "fixed" and read_meta(tmp_path).name == "fixed"
