"""The run page shows the determinism block's batched functions, from a real scheduled run.

A backend on loopback runs (through its scheduler and an eval subprocess) a graph whose
shared, batched user function subtracts half the batch mean and declares no examples: the
audit catches it. The run page, opened in Chromium, lists the function with its mode, the
mismatch and the first episode affected, under a "BROKEN" level badge.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.backend import Backend
from support.batched_nodesets import write_batched_workspace
from support.browser import CHROMIUM, NO_CHROMIUM

RUN_DEADLINE_S = 180.0
FUNCTION = "probe_model.centred_unchecked"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    with Backend(write_batched_workspace(tmp_path)) as backend:
        yield backend


def test_the_run_page_lists_the_batched_function_the_audit_caught(
    backend: Backend, page: Any
) -> None:
    run_id = backend.start_run("centred_unchecked_graph", episode_count=3, worker_count=4)
    summary = backend.wait_status(run_id, "completed", RUN_DEADLINE_S)
    entry = summary["determinism"]["batched_functions"][FUNCTION]
    assert summary["determinism"]["guaranteed"] is False
    assert entry["mode"] == "per_request" and entry["mismatch"].startswith("audit: ")
    first = entry["first_episode_affected"]
    assert isinstance(first, int)

    page.goto(f"{backend.url}/#/run/{run_id}")
    row = page.locator(f"#batched-functions tr[data-function='{FUNCTION}']")
    row.wait_for()
    text = row.inner_text()
    assert row.get_attribute("data-verified") == "false"
    assert "per_request" in text and "no start-up check" in text
    assert f"first episode affected: {first}" in text
    level = page.locator("#determinism-level")
    assert level.get_attribute("data-level") == "broken" == summary["determinism"]["level"]
    assert "BROKEN" in level.inner_text()
    assert row.get_attribute("data-level") == "broken"
