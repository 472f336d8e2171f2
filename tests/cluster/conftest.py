"""One simulated Ray cluster for every test of this folder (it takes seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.ray_cluster import start_cluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    cluster = start_cluster()
    import ray

    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
