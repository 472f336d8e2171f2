"""BatchEvalRunner end to end on a real replicated env: persistence, progress, determinism.

The env ``tenv`` (tests/support/counting_env.py) lives in a real workspace under tmp_path and
runs in auto_host servers (they find it through ``AGENTCANVAS_HOME``). An episode is a pure
function of its seed: it lasts ``2 + seed % 3`` actions (``base_length`` 2) and, with
``render`` on, returns a frame whose pixels encode ``(seed + steps) % 256`` so that every asset
can be traced to its episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from agentcanvas.eval import metrics, records
from agentcanvas.eval import recorder as recorder_module
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.events import EvalEpisodeDone, LiveEvent
from agentcanvas.eval.foreground import ForegroundRun, run_foreground
from agentcanvas.eval.frame_reader import FrameReader
from agentcanvas.eval.media import frame_views
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner, plan_episodes
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import append_jsonl, read_json, read_jsonl
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.counting_env import TENV
from support.registry import started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 60.0
TASKS = ["t0", "t1"]
N_PER_TASK = 3
N_TOTAL = len(TASKS) * N_PER_TASK


def make_graph(name: str = "tgraph", label: str = "v1", latency_ms: float = 15.0) -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": name,
            "env": {
                "nodeset": "tenv",
                "fields": {"step_latency_ms": latency_ms, "base_length": 2, "step_budget": 10},
                "tasks": TASKS,
            },
            "nodes": [
                {"id": "act", "type": "core.constant", "config": {"value": 1}},
                {"id": "label", "type": "core.constant", "config": {"value": label}},
                {"id": "facts", "type": "core.graphIn"},
                {"id": "env", "type": "tenv.step"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "act.value", "target": "env.action"},
                {"source": "env.metrics", "target": "out.metrics"},
                {"source": "facts.seed", "target": "out.seed"},
                {"source": "label.value", "target": "out.label"},
            ],
        }
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "runner_ws", {"tenv": TENV}, [make_graph()])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, "tgraph", worker_count=3) as reg:
        yield reg


class Recorder:
    """A broadcast callback that reads summary.json at every episode boundary."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.events: list[LiveEvent] = []
        self.on_disk: list[EvalRun] = []
        self.index_lines: list[list[EpisodeResult]] = []  # episodes.jsonl, completion order

    def __call__(self, event: LiveEvent) -> None:
        self.events.append(event)
        if isinstance(event, EvalEpisodeDone):
            self.on_disk.append(EvalRun.model_validate(read_json(self.run_dir.summary_path)))
            lines = read_jsonl(self.run_dir.episodes_index_path).records
            self.index_lines.append([EpisodeResult.model_validate(r) for r in lines])

    def completion_order(self) -> list[int]:
        return [e.episode.index for e in self.events if isinstance(e, EvalEpisodeDone)]


async def run_at(
    registry: WorkspaceComponentRegistry, root: Path, workers: int
) -> tuple[EvalRun, Recorder]:
    run_dir = RunDir(root)
    recorder = Recorder(run_dir)
    config = EvalConfig(
        graph_name="tgraph", episode_count=N_PER_TASK, worker_count=workers, seed=11
    )
    runner = BatchEvalRunner(
        RunContext(
            registry,
            registry.load_graph("tgraph"),
            config,
            run_dir,
            run_id="20260101_000000",
            broadcast=recorder,
        )
    )
    summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    assert summary.status_counts == {"completed": N_TOTAL}
    return summary, recorder


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def one_worker(
    registry: WorkspaceComponentRegistry, tmp_path_factory: pytest.TempPathFactory
) -> tuple[EvalRun, Recorder]:
    return await run_at(registry, tmp_path_factory.mktemp("w1"), 1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def three_workers(
    registry: WorkspaceComponentRegistry, tmp_path_factory: pytest.TempPathFactory
) -> tuple[EvalRun, Recorder]:
    return await run_at(registry, tmp_path_factory.mktemp("w3"), 3)


# -- determinism ------------------------------------------------------------------------------


async def test_seeds_come_from_episode_identity_never_the_worker_slot(
    one_worker: tuple[EvalRun, Recorder], three_workers: tuple[EvalRun, Recorder]
) -> None:
    (w1, _), (w3, _) = one_worker, three_workers
    expected = [(t, i, episode_seed(11, t, i)) for t in TASKS for i in range(N_PER_TASK)]
    for summary in (w1, w3):
        assert [(e.task, e.episode_index, e.seed) for e in summary.episodes] == expected
        for ep in summary.episodes:
            assert ep.metrics["seed"] == ep.seed  # what the nodes saw (CallContext)
            assert ep.metrics["score"] == (ep.seed % 1000) / 1000.0  # what the env was given
    assert len({e.seed for e in w1.episodes}) == N_TOTAL
    assert [e.identity() for e in w1.episodes] == [e.identity() for e in w3.episodes]


async def test_plan_is_a_function_of_the_config_not_the_worker_count() -> None:
    graph = make_graph()
    plans = [
        plan_episodes(
            EvalConfig(
                graph_name="tgraph", episode_count=4, worker_count=w, seed=7, start_index=100
            ),
            graph,
            "run",
        )
        for w in (1, 3, 8)
    ]
    assert plans[0] == plans[1] == plans[2]
    assert [(s.index, s.task, s.episode_index) for s in plans[0]] == [
        (k * 4 + i, t, 100 + i) for k, t in enumerate(TASKS) for i in range(4)
    ]
    assert all(s.seed == episode_seed(7, s.task, s.episode_index) for s in plans[0])
    other_seed = plan_episodes(EvalConfig(graph_name="tgraph", episode_count=4, seed=8), graph, "r")
    assert {s.seed for s in other_seed}.isdisjoint({s.seed for s in plans[0]})


# -- progress and aggregates ------------------------------------------------------------------


async def test_a_rewrite_the_recordings_skip_is_made_up_by_the_live_refresh(
    registry: WorkspaceComponentRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the recordings' rewrites all but switched off, summary.json still follows the
    run: every boundary shows on disk within a second, while the run goes (the live
    aggregates' refresh saves after each new result)."""
    monkeypatch.setattr(recorder_module, "LIVE_SAVE_MIN_INTERVAL_S", 3600.0)
    run_dir = RunDir(tmp_path)
    loop = asyncio.get_running_loop()
    boundaries: list[tuple[int, float]] = []

    def note(event: LiveEvent) -> None:
        if isinstance(event, EvalEpisodeDone):
            boundaries.append((len(boundaries) + 1, loop.time()))

    config = EvalConfig(graph_name="tgraph", episode_count=N_PER_TASK, worker_count=1, seed=11)
    runner = BatchEvalRunner(
        RunContext(
            registry, make_graph(latency_ms=120.0), config, run_dir, run_id="r", broadcast=note
        )
    )
    seen: list[tuple[int, float]] = []

    async def poll() -> None:
        while True:
            with contextlib.suppress(Exception):  # not written yet
                on_disk = read_json(run_dir.summary_path)
                if on_disk["status"] == "running":
                    seen.append((on_disk["episodes_done"], loop.time()))
            await asyncio.sleep(0.02)

    polling = asyncio.ensure_future(poll())
    try:
        summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
        finished = loop.time()
    finally:
        polling.cancel()
    assert summary.status_counts == {"completed": N_TOTAL}
    assert len(boundaries) == N_TOTAL
    for k, at in boundaries:
        if at + 1.0 < finished:  # the run went on for a second more: it shows before then
            assert any(done >= k and t <= at + 1.0 for done, t in seen), (k, seen)
    assert max(done for done, _ in seen) >= N_TOTAL - 1


async def test_a_live_refresh_that_ends_after_the_run_leaves_the_final_summary_alone(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    """The live aggregates' refresh computes in a thread that cancelling its task does not
    stop: one that installs after the run ended must not put its (older) aggregates into
    the complete summary. Here it runs after the end, on results it has not seen stored."""
    run_dir = RunDir(tmp_path)
    config = EvalConfig(graph_name="tgraph", episode_count=1, worker_count=1, seed=11)
    runner = BatchEvalRunner(
        RunContext(registry, make_graph(latency_ms=0.0), config, run_dir, run_id="r")
    )
    summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    final = run_dir.summary_path.read_bytes()
    aggregates = dict(summary.aggregate_metrics)
    stray = runner.results[0].model_copy(update={"metrics": {"success": 0.0, "steps": 99}})
    runner.recorder._results[0] = stray  # what an older snapshot could hold
    await asyncio.to_thread(runner.recorder._refresh_aggregates)
    assert runner.run.aggregate_metrics == aggregates
    assert run_dir.summary_path.read_bytes() == final


async def test_the_live_summary_follows_the_episode_boundaries(
    three_workers: tuple[EvalRun, Recorder],
) -> None:
    """What summary.json says at each boundary: bounded (no records), never ahead of the
    index, its aggregates those of the index's first lines; rewritten at most every
    LIVE_SAVE_MIN_INTERVAL_S by the recordings (the first boundary always), so it may lag a
    boundary behind, never more than the interval."""
    _, recorder = three_workers
    done = [s.episodes_done for s in recorder.on_disk]
    assert done[0] == 1 and done == sorted(done)
    assert all(d <= k for k, d in enumerate(done, 1))
    boundaries = zip(
        recorder.on_disk, recorder.index_lines, recorder.completion_order(), strict=True
    )
    for on_disk, lines, index in boundaries:
        assert on_disk.status == "running"
        # The bounded summary: no records while the run goes; the index has them.
        assert on_disk.episodes == [] and not on_disk.episodes_complete
        assert index in {e.index for e in lines}  # written before the broadcast
        assert len(lines) >= on_disk.episodes_done
        # Live aggregates say which results they cover: the first lines of the index.
        covered = lines[: on_disk.episodes_aggregated]
        assert on_disk.aggregate_metrics == metrics.aggregate_metrics(covered, on_disk.metric_rules)
        assert on_disk.aggregate_by_task == metrics.aggregate_by_task(covered, on_disk.metric_rules)
    wire = [e.wire() for e in recorder.events]
    progress = [e["episodes_done"] for e in wire if e["type"] == "eval_progress"]
    assert progress == list(range(1, N_TOTAL + 1))
    assert wire[-1] == {
        "type": "eval_complete",
        "source": "eval",
        "run_id": "20260101_000000",
        "status": "completed",
    }
    assert all(e["source"] == "eval" for e in wire)


async def test_aggregates_come_from_results_sorted_by_index(
    one_worker: tuple[EvalRun, Recorder], three_workers: tuple[EvalRun, Recorder]
) -> None:
    (w1, rec1), (w3, rec3) = one_worker, three_workers
    assert rec1.completion_order() == list(range(N_TOTAL))
    order = rec3.completion_order()
    assert sorted(order) == list(range(N_TOTAL))
    assert order != sorted(order), "precondition: three workers finish out of index order"
    assert [e.index for e in w3.episodes] == list(range(N_TOTAL))
    assert w3.aggregate_metrics == w1.aggregate_metrics
    assert w3.aggregate_by_task == w1.aggregate_by_task
    assert w3.aggregate_metrics["score"].method == "betting"  # order-sensitive if unsorted
    by_index = sorted(w3.episodes, key=lambda e: e.index)
    assert w3.aggregate_metrics == metrics.aggregate_metrics(by_index, w3.metric_rules)
    assert set(w3.aggregate_by_task) == set(TASKS)


# -- the run folder ---------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def foreground(workspace: Path) -> ForegroundRun:
    """A whole foreground run (own registry: run_foreground stops every server it used)."""
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    config = EvalConfig(graph_name="tgraph", episode_count=2, worker_count=2, save_frames=True)
    run = await asyncio.wait_for(
        run_foreground(registry, registry.load_graph("tgraph"), config), RUN_DEADLINE_S
    )
    assert registry.fleet.records == {}
    return run


REQUIRED_ROOT = {"spec.json", "summary.json", "graph.json", "_DONE", "episodes", "episodes.jsonl"}


async def test_run_folder_layout(foreground: ForegroundRun, workspace: Path) -> None:
    root = foreground.run_dir.root
    assert root.parent == workspace / "outputs" / "eval_runs"
    assert root.name == foreground.run_id
    entries = {p.name for p in root.iterdir()}
    assert entries >= REQUIRED_ROOT
    # Foreground runs keep their node-set servers' logs beside the seed's layout, and the
    # run folder's writer lock file (_LOCK, free once the run ended).
    assert entries - REQUIRED_ROOT <= {"servers", "_LOCK"}
    assert (root / "_DONE").read_bytes() == b""
    spec = read_json(root / "spec.json")
    assert spec["run_id"] == foreground.run_id
    assert spec["config"]["worker_count"] == 2
    summary = EvalRun.model_validate(read_json(root / "summary.json"))
    assert summary.status == "completed" and summary.run_id == foreground.run_id
    assert summary.version == 1 and summary.episodes_done == summary.episodes_total == 4
    assert read_json(root / "graph.json") == make_graph().model_dump(mode="json")
    assert sorted(p.name for p in (root / "episodes").iterdir()) == [f"ep{i:04d}" for i in range(4)]
    for i in range(4):
        folder = root / "episodes" / f"ep{i:04d}"
        assert {p.name for p in folder.iterdir()} == {"log.jsonl", "assets", "episode.json"}


async def test_the_final_summary_is_what_the_episode_folders_rebuild(
    foreground: ForegroundRun, three_workers: tuple[EvalRun, Recorder]
) -> None:
    run_dir = foreground.run_dir
    on_disk = read_json(run_dir.summary_path)
    summary = EvalRun.model_validate(on_disk)
    assert summary.episodes_complete and summary.episodes_aggregated == 4
    rebuilt = records.recorded_results(run_dir)
    assert [e.model_dump(mode="json") for e in rebuilt] == on_disk["episodes"]
    assert summary.aggregate_metrics == metrics.aggregate_metrics(rebuilt, summary.metric_rules)
    assert summary.aggregate_by_task == metrics.aggregate_by_task(rebuilt, summary.metric_rules)
    assert summary.status_counts == metrics.status_counts(rebuilt)
    # The index holds the same records, in completion order; readers sort them by index.
    assert list(records.read_index(run_dir).records) == on_disk["episodes"]
    assert records.episode_records(run_dir, on_disk) == on_disk["episodes"]
    # Also for a run whose episodes finished out of index order (three workers).
    w3, recorder = three_workers
    w3_disk = read_json(recorder.run_dir.summary_path)
    w3_rebuilt = records.recorded_results(recorder.run_dir)
    assert [e.model_dump(mode="json") for e in w3_rebuilt] == w3_disk["episodes"]
    assert w3.aggregate_metrics == metrics.aggregate_metrics(w3_rebuilt, w3.metric_rules)
    index_order = [r["index"] for r in read_jsonl(recorder.run_dir.episodes_index_path).records]
    assert index_order == recorder.completion_order() != sorted(index_order)
    assert list(records.read_index(recorder.run_dir).records) == w3_disk["episodes"]


async def test_an_episode_is_reconstructible_from_its_own_folder(
    foreground: ForegroundRun,
) -> None:
    summary = EvalRun.model_validate(read_json(foreground.run_dir.summary_path))
    for record in summary.episodes:
        folder = foreground.run_dir.episode_dir(record.index)
        episode = read_json(folder / "episode.json")
        assert episode["run_id"] == foreground.run_id and episode["graph_name"] == "tgraph"
        assert {
            k: episode[k]
            for k in ("index", "task", "episode_index", "seed", "metrics", "steps", "status")
        } == {
            "index": record.index,
            "task": record.task,
            "episode_index": record.episode_index,
            "seed": record.seed,
            "metrics": record.metrics,
            "steps": record.steps,
            "status": "completed",
        }
        log = read_jsonl(folder / "log.jsonl")
        assert log.torn_lines == 0
        steps = record.steps
        assert [r["step"] for r in log.records if r["node"] == "env"] == list(range(steps))
        facts = [r for r in log.records if r["node"] == "facts"]
        assert [r["step"] for r in facts] == list(range(steps))
        # Only this episode's firings: every graphIn firing names this episode.
        assert all(r["outputs"]["seed"] == record.seed for r in facts)
        assert all(r["outputs"]["episode_key"].endswith(f":{record.index}") for r in facts)
        assert all(r["outputs"]["task"] == record.task for r in facts)
        # Its frames: one video of the env's view, a frame per step, each traced to it.
        assert [p.name for p in (folder / "assets").iterdir()] == ["env.mp4"]
        view = frame_views(folder / "assets")["env"]
        assert view.steps == tuple(range(steps))
        reader = FrameReader()
        for s in range(steps):
            with Image.open(io.BytesIO(reader.png(view, s, "env"))) as image:
                pixels = np.asarray(image).astype(int)
            assert pixels.shape == (4, 4, 3)
            assert int(np.abs(pixels - (record.seed + s + 1) % 256).max()) <= 2  # H.264: near


async def test_a_torn_log_line_is_skipped_by_the_reader(foreground: ForegroundRun) -> None:
    path = foreground.run_dir.episode_log_path(0)
    before = read_jsonl(path)
    assert before.torn_lines == 0 and before.records
    torn = json.dumps({"step": 99, "node": "env", "status": "ok"}).encode()[:17]
    with path.open("ab") as log:  # a writer that died halfway through a line
        log.write(torn)
    assert not path.read_bytes().endswith(b"\n")
    after = read_jsonl(path)
    assert after.records == before.records
    assert after.torn_lines == 1
    append_jsonl(path, {"step": 100, "node": "env", "status": "ok"})  # the next writer
    resumed = read_jsonl(path)
    assert resumed.records == (*before.records, {"step": 100, "node": "env", "status": "ok"})
    assert resumed.torn_lines == 1


async def test_graph_json_is_frozen_at_construction(
    registry: WorkspaceComponentRegistry, workspace: Path, tmp_path: Path
) -> None:
    graph = registry.load_graph("tgraph")
    original = graph.model_dump(mode="json")
    config = EvalConfig(graph_name="tgraph", episode_count=1, tasks=["t0"])
    runner = BatchEvalRunner(
        RunContext(registry, graph, config, RunDir(tmp_path), run_id="20260101_000000")
    )
    # Edit the source graph afterwards: in memory (its node config) and on disk.
    graph.node("label").config["value"] = "edited"
    (workspace / "graphs" / "tgraph.json").write_text(
        make_graph(label="edited on disk").to_json(), encoding="utf-8"
    )
    try:
        summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    finally:
        (workspace / "graphs" / "tgraph.json").write_text(make_graph().to_json(), encoding="utf-8")
    assert read_json(tmp_path / "graph.json") == original
    assert summary.episodes[0].metrics["label"] == "v1"


async def test_a_resumed_runner_runs_only_the_missing_episodes_and_ends_equal(
    registry: WorkspaceComponentRegistry,
    three_workers: tuple[EvalRun, Recorder],
    tmp_path: Path,
) -> None:
    uninterrupted, _ = three_workers
    kept = [uninterrupted.episodes[i] for i in (4, 0, 2)]
    run_dir = RunDir(tmp_path)
    recorder = Recorder(run_dir)
    config = EvalConfig(graph_name="tgraph", episode_count=N_PER_TASK, worker_count=2, seed=11)
    runner = BatchEvalRunner(
        RunContext(
            registry,
            registry.load_graph("tgraph"),
            config,
            run_dir,
            run_id="20260101_000000",
            broadcast=recorder,
            previous=kept,
        )
    )
    # The index starts with the kept results, sorted by index.
    assert [r["index"] for r in read_jsonl(run_dir.episodes_index_path).records] == [0, 2, 4]
    resumed = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    assert sorted(recorder.completion_order()) == [1, 3, 5]
    done = [s.episodes_done for s in recorder.on_disk]
    # the kept ones counted from the first save on (a commit group may add more than one)
    assert done[0] >= 4 and done == sorted(done) and done[-1] <= 6
    assert [e.identity() for e in resumed.episodes] == [
        e.identity() for e in uninterrupted.episodes
    ]
    assert resumed.aggregate_metrics == uninterrupted.aggregate_metrics
    assert resumed.aggregate_by_task == uninterrupted.aggregate_by_task
    on_disk = read_json(run_dir.summary_path)
    assert on_disk["episodes_complete"] and on_disk["episodes_aggregated"] == N_TOTAL
    assert list(records.read_index(run_dir).records) == on_disk["episodes"]
