"""An HTTP status comes from the error's class, never from its message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from agentcanvas.api.app import create_app
from agentcanvas.api.error_handlers import status_of
from agentcanvas.errors import (
    AgentCanvasError,
    AssetNotFoundError,
    ConfigError,
    EpisodeNotFoundError,
    GraphValidationError,
    ProtocolError,
    ProtocolVersionError,
    RunError,
    RunLockedError,
    RunNotFoundError,
    UnknownGraphError,
    UnknownNodeSetError,
    UserInputError,
)
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RunNotFoundError("x"), 404),
        (EpisodeNotFoundError("x"), 404),
        (AssetNotFoundError("x"), 404),
        (UnknownGraphError("x"), 404),
        (UnknownNodeSetError("x"), 404),
        # the words a message happens to hold decide nothing
        (UserInputError("run_id: no run 'x'"), 400),
        (GraphValidationError("edge a -> b: target node 'b' does not exist"), 400),
        (ConfigError("x"), 400),
        (RunLockedError("x"), 409),
        (ProtocolError("x"), 502),
        (ProtocolVersionError("x"), 502),
        (RunError("x"), 500),
        (AgentCanvasError("x"), 500),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_the_status_follows_the_class(exc: AgentCanvasError, status: int) -> None:
    assert status_of(exc) == status


@pytest_asyncio.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(tmp_path, "http://127.0.0.1:9")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            yield http


def write_run(workspace: Path, run_id: str) -> None:
    run_dir = RunDir(workspace / "outputs" / "eval_runs" / run_id)
    run_dir.create()
    config = EvalConfig(graph_name="babyai_oracle", episode_count=1)
    run = EvalRun(run_id=run_id, graph_name="babyai_oracle", config=config, episodes_total=1)
    atomic_write_json(run_dir.summary_path, run.model_dump(mode="json"))


async def test_missing_things_are_404_named_by_class(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    write_run(tmp_path, "20260101_000000")
    cases = {
        "/api/eval/v2/status/20260101_000001": "RunNotFoundError",
        "/api/eval/v2/runs/20260101_000000/episodes/4": "EpisodeNotFoundError",
        "/api/eval/v2/runs/20260101_000000/episodes/4/log": "EpisodeNotFoundError",
    }
    for path, error in cases.items():
        response = await client.get(path)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"] == error, (path, response.json())
