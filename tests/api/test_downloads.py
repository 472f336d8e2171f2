"""Run downloads through a real ``agentcanvas serve``: summary.json and episodes.csv.

The workspace holds a real ``babyai_oracle`` run (6 episodes) and a live copy of it stopped
after 4 (records only in episodes.jsonl); both download with the right rows.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest

from agentcanvas.eval.runlock import hold
from agentcanvas.eval.store import RunDir
from support.backend import Backend
from support.export_runs import LIVE_DONE, ExportRuns, make_runs

API = "/api/eval/v2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ExportRuns:
    return make_runs(tmp_path_factory.mktemp("downloads"))


@pytest.fixture(scope="module")
def backend(runs: ExportRuns) -> Iterator[Backend]:
    # The live run's writer: its lock held, so the backend's recovery leaves it live.
    with hold(RunDir(runs.runs / runs.live_id)):
        server = Backend(runs.workspace)
        try:
            yield server
        finally:
            server.close()


def test_summary_json_downloads_with_every_record(runs: ExportRuns, backend: Backend) -> None:
    response = backend.http.get(f"{API}/runs/{runs.done_id}/summary.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    disposition = response.headers["content-disposition"]
    assert disposition == f'attachment; filename="{runs.done_id}_summary.json"'
    body = json.loads(response.content)  # strict: no NaN
    assert body == runs.summary(runs.done_id)


def test_episodes_csv_downloads_one_row_per_episode(runs: ExportRuns, backend: Backend) -> None:
    response = backend.http.get(f"{API}/runs/{runs.done_id}/episodes.csv")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert f'filename="{runs.done_id}_episodes.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    records = runs.summary(runs.done_id)["episodes"]
    assert [int(r["index"]) for r in rows] == [r["index"] for r in records] == list(range(6))
    assert [int(r["seed"]) for r in rows] == [r["seed"] for r in records]
    assert {r["run_id"] for r in rows} == {runs.done_id}
    assert [float(r["metric_return"]) for r in rows] == [r["metrics"]["return"] for r in records]


def test_a_live_run_downloads_its_index(runs: ExportRuns, backend: Backend) -> None:
    summary = backend.http.get(f"{API}/runs/{runs.live_id}/summary.json").json()
    assert summary["episodes_complete"] is False
    assert [e["index"] for e in summary["episodes"]] == list(range(LIVE_DONE))
    response = backend.http.get(f"{API}/runs/{runs.live_id}/episodes.csv")
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [r["seed"] for r in rows] == [str(e["seed"]) for e in summary["episodes"]]


@pytest.mark.parametrize("file", ["summary.json", "episodes.csv"])
def test_unknown_run_is_404_naming_run_id(backend: Backend, file: str) -> None:
    response = backend.http.get(f"{API}/runs/20990101_000000/{file}")
    assert response.status_code == 404
    assert "run_id" in response.text
    assert backend.http.get(f"{API}/runs/not-a-run/{file}").status_code == 422
