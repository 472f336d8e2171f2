"""One simulated Ray cluster for every test of this folder (it takes seconds to start)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: loopback only

from support.ray_cluster import start_cluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    import ray

    if ray.is_initialized():  # pragma: no cover - a session left by another test
        ray.shutdown()
    assert not ray._private.ray_constants.ENABLE_RAY_CLUSTER, "Ray imported before the env"
    cluster = start_cluster()

    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
