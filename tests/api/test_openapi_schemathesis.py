"""The OpenAPI schema tells the truth: schemathesis over every operation of a real backend.

Every operation is called with generated requests (valid and invalid ones) and every check of
schemathesis runs on each answer: no server error, only documented status codes, bodies and
content types as documented, invalid data refused, and 405 for methods a path does not have.
The examples are bounded so that the whole module stays quick. The workspace is empty: a
generated graph name never names a graph, so nothing is run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from agentcanvas.api.app import create_app
from support.backend import Server, serve

MAX_EXAMPLES = 12
QUEUE = "/api/eval/v2/queue"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("schemathesis")


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    yield from serve(workspace, log=workspace / "serve.log", ready_path=QUEUE)


# The schema is the app's own, built without starting it (collection needs it before any
# server runs; a test below checks that the server serves exactly this one).
SPEC = create_app(Path("."), "http://127.0.0.1:0").openapi()
# A schema-valid request is never refused as invalid (400 or 422): the schema says what each
# handler accepts. It may name a thing that does not exist (404) or conflict with the state
# (409).
ACCEPTED = ["2xx", "401", "403", "404", "409"]
# The coverage phase enumerates every boundary case of a schema at collection time; for the
# leaderboard's run list (a pattern of 2 to 20 ids) that enumeration cost more than the
# collection of the rest of the suite, so that operation gets the examples and fuzzing
# phases only.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
        "operations": [
            {
                "include-path": "/api/eval/v2/leaderboard",
                "phases": {"coverage": {"enabled": False}},
            }
        ],
    }
)
schema = schemathesis.openapi.from_dict(SPEC, config=CONFIG)


def test_the_served_schema_is_the_tested_one(server: Server) -> None:
    assert server.request("GET", "/openapi.json") == (200, SPEC)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case: Any, server: Server) -> None:
    # The base URL is the loopback address the Host guard accepts.
    case.call_and_validate(base_url=f"http://127.0.0.1:{server.port}")


def test_nothing_was_queued(server: Server, workspace: Path) -> None:
    assert server.request("GET", QUEUE) == (200, {"queued": [], "running": []})
    runs = workspace / "outputs" / "eval_runs"
    assert not runs.exists() or not any(runs.iterdir())
