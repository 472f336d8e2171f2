"""CalibrationStore: estimates from recent peaks per graph content, persistence, recovery
from a bad file. Keys are ``graph_fingerprint`` values; ``"nav"`` stands for one here."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agentcanvas.scheduler.calibration import (
    CALIBRATION_FILE_VERSION,
    SAFETY_MARGIN,
    CalibrationStore,
    graph_fingerprint,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "calibration.json"


def test_estimate_is_recent_peak_times_margin(path: Path) -> None:
    store = CalibrationStore(path)
    store.record("nav", 2, {"ram": 1_000.0, "vram": 4_000.0})
    store.record("nav", 2, {"ram": 1_500.0, "vram": 3_000.0})

    assert store.estimate_mb("nav", 2, "ram") == pytest.approx(1_500.0 * SAFETY_MARGIN)
    assert store.estimate_mb("nav", 2, "vram") == pytest.approx(4_000.0 * SAFETY_MARGIN)
    assert SAFETY_MARGIN == 1.2


def test_estimate_is_none_until_observed(path: Path) -> None:
    store = CalibrationStore(path)
    store.record("nav", 2, {"ram": 1_000.0})

    assert store.estimate_mb("nav", 4, "ram") is None  # other worker count
    assert store.estimate_mb("other", 2, "ram") is None  # other graph
    assert store.estimate_mb("nav", 2, "vram") is None  # resource never measured


def test_only_recent_observations_count(path: Path) -> None:
    store = CalibrationStore(path, max_observations=5)
    store.record("nav", 1, {"ram": 9_000.0})  # an outlier that ages out
    for mb in (100.0, 200.0, 300.0, 400.0, 500.0):
        store.record("nav", 1, {"ram": mb})

    assert len(store.observations("nav", 1)) == 5
    assert store.estimate_mb("nav", 1, "ram") == pytest.approx(500.0 * SAFETY_MARGIN)


def test_persists_across_instances(path: Path) -> None:
    CalibrationStore(path).record("nav", 3, {"ram": 700.0, "vram": 2_000.0}, graph_name="Nav")

    reopened = CalibrationStore(path)
    assert reopened.estimate_mb("nav", 3, "vram") == pytest.approx(2_000.0 * SAFETY_MARGIN)
    on_disk = json.loads(path.read_text())
    assert on_disk["version"] == CALIBRATION_FILE_VERSION
    assert on_disk["entries"][0]["graph_key"] == "nav"
    assert on_disk["entries"][0]["graph_name"] == "Nav"  # for people reading the file
    assert [p.name for p in path.parent.iterdir()] == ["calibration.json"]  # no temp left


def test_load_applies_max_observations(path: Path) -> None:
    store = CalibrationStore(path)
    for mb in (900.0, 100.0, 200.0):
        store.record("nav", 1, {"ram": mb})

    short = CalibrationStore(path, max_observations=2)
    assert short.observations("nav", 1) == [{"ram": 100.0}, {"ram": 200.0}]


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe\x00garbage",
        b'{"version": 99, "entries": []}',
        b'{"version": 2, "entries": [{"graph_key": "nav", "worker_count": 0}]}',
        b'{"version": 2, "entries": [{"graph_name": "nav", "worker_count": 1}]}',
        b"[]",
    ],
)
def test_corrupt_file_is_moved_aside(
    path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    with caplog.at_level(logging.WARNING, logger="agentcanvas.scheduler.calibration"):
        store = CalibrationStore(path)

    assert store.estimate_mb("nav", 1, "ram") is None
    aside = [p for p in path.parent.iterdir() if p.name.startswith("calibration.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert "corrupt" in caplog.text
    store.record("nav", 1, {"ram": 10.0})
    assert CalibrationStore(path).estimate_mb("nav", 1, "ram") == pytest.approx(12.0)


def test_record_validates_input(path: Path) -> None:
    store = CalibrationStore(path)
    with pytest.raises(ValueError):
        store.record("nav", 0, {"ram": 1.0})
    with pytest.raises(ValueError):
        store.record("", 1, {"ram": 1.0})
    store.record("nav", 1, {"ram": float("nan"), "vram": -1.0})  # nothing measurable
    assert store.observations("nav", 1) == []
    assert not path.exists()
    with pytest.raises(ValueError):
        CalibrationStore(path, max_observations=0)


def test_unwritable_location_keeps_estimates_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = CalibrationStore(blocker / "calibration.json")

    with caplog.at_level(logging.WARNING, logger="agentcanvas.scheduler.calibration"):
        store.record("nav", 1, {"ram": 50.0})

    assert store.estimate_mb("nav", 1, "ram") == pytest.approx(60.0)
    assert "cannot save calibration" in caplog.text


def test_fingerprint_is_the_graph_content_not_its_name_nor_key_order() -> None:
    graph = {"name": "nav", "nodes": [{"id": "a", "type": "x.y"}], "edges": []}
    reordered = {"edges": [], "nodes": [{"type": "x.y", "id": "a"}], "name": "nav"}
    edited = {**graph, "nodes": [{"id": "a", "type": "x.z"}]}

    assert graph_fingerprint(graph) == graph_fingerprint(reordered)
    assert graph_fingerprint(graph) != graph_fingerprint(edited)  # same name, other content
    assert len(graph_fingerprint(graph)) == 16


def test_a_version_1_file_keyed_by_name_is_set_aside_not_trusted(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = {
        "version": 1,
        "entries": [{"graph_name": "nav", "worker_count": 1, "observations": [{"vram": 5_000.0}]}],
    }
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))

    with caplog.at_level(logging.WARNING, logger="agentcanvas.scheduler.calibration"):
        store = CalibrationStore(path)

    assert store.estimate_mb("nav", 1, "vram") is None
    aside = [p for p in path.parent.iterdir() if p.name.startswith("calibration.json.v1-")]
    assert len(aside) == 1 and json.loads(aside[0].read_text()) == old
    assert "graph content" in caplog.text
