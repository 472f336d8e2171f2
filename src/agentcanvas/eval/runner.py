"""BatchEvalRunner: one graph × many episodes on N workers, bit-identical at any N.

Results are keyed by episode index; every aggregate is recomputed from the results sorted by
index at each episode boundary (never accumulated in completion order), and summary.json is
rewritten atomically then — the live progress channel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentcanvas.errors import ConfigError, ServerDiedError, ServerError
from agentcanvas.eval import metrics
from agentcanvas.eval.config import DeterminismInfo, EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.episode import (
    EpisodeOptions,
    EpisodeSpec,
    EpisodeWiring,
    run_episode,
)
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.store import RunDir, append_jsonl, atomic_write_json
from agentcanvas.eval.worker_pool import EnvWorkerPool, WorkerHandle, partition_contiguous
from agentcanvas.graph.executor import ExecutionPrinciples
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.registry import WorkspaceComponentRegistry

Broadcast = Callable[[dict[str, Any]], None]
AGGREGATE_INTERVAL_S = 1.0  # large runs: intervals refreshed at most this often
FULL_REFRESH_MAX_EPISODES = 500  # up to here every boundary recomputes every aggregate
log = logging.getLogger(__name__)
RETRYABLE = ("error", "exception", "timeout")


def episode_tasks(config: EvalConfig, graph: Graph) -> list[str]:
    """Tasks of the run: the config's, else the graph's env tasks, else its panel task."""
    if config.tasks:
        return list(config.tasks)
    if graph.env is None:
        return [""]
    return list(graph.env.tasks) or [str(graph.env.fields.get("task_id", ""))]


def plan_episodes(config: EvalConfig, graph: Graph, run_key: str) -> list[EpisodeSpec]:
    """Index i ↦ (task = tasks[i // n], episode_index = start + i % n), seed from identity."""
    specs = []
    n = config.episode_count
    for position, task in enumerate(episode_tasks(config, graph)):
        for offset in range(n):
            index = position * n + offset
            ep_index = config.start_index + offset
            seed = episode_seed(config.seed, task, ep_index)
            specs.append(EpisodeSpec(index, task, ep_index, seed, key=f"{run_key}:{index}"))
    return specs


class _EpisodeLog:
    """Appends one episode's node firings to its own log.jsonl."""

    def __init__(self, path: Any) -> None:
        self.path = path

    def record(self, entry: dict[str, Any]) -> None:
        append_jsonl(self.path, entry)


class BatchEvalRunner:
    """Runs a frozen graph over the planned episodes with an EnvWorkerPool."""

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        run_dir: RunDir,
        *,
        run_id: str,
        broadcast: Broadcast | None = None,
        determinism: DeterminismInfo | None = None,
        previous: Sequence[EpisodeResult] = (),
    ) -> None:
        self.registry = registry
        self.graph = graph.model_copy(deep=True)  # frozen at construction
        self.config = config
        self.run_dir = run_dir
        self.broadcast = broadcast or (lambda event: None)
        _require_replicated_env(registry, self.graph)
        self.specs = plan_episodes(config, self.graph, run_id)
        self.results: dict[int, EpisodeResult] = {r.index: r for r in previous}
        self.results_lock = asyncio.Lock()
        self.cancel_event = asyncio.Event()
        self.aborted = False
        self._last_full_refresh = 0.0
        self.run = EvalRun(
            run_id=run_id,
            graph_name=graph.name,
            config=config,
            episodes_total=len(self.specs),
            determinism=determinism or DeterminismInfo(),
        )
        run_dir.create()
        atomic_write_json(run_dir.graph_path, self.graph.model_dump(mode="json"))

    def cancel(self, aborted: bool = False) -> None:
        """Stop after the episodes in flight; ``aborted`` when our parent died (resumable)."""
        self.aborted = self.aborted or aborted
        self.cancel_event.set()

    async def execute(self) -> EvalRun:
        """Run the missing episodes on ``worker_count`` workers; returns the final summary."""
        todo = [s.index for s in self.specs if s.index not in self.results]
        self.run.status = "running"
        self.run.timings["started_at"] = time.time()
        self._refresh()
        self.save()
        env_ns = self.graph.env.nodeset if self.graph.env else None
        replicated = self.registry.servers.replicated_in(self.graph)
        chunks = partition_contiguous(todo, self.config.worker_count)
        pool = EnvWorkerPool(self.registry, self.config.worker_count, env_ns, replicated)
        async with pool, asyncio.TaskGroup() as group:
            for worker_id, chunk in enumerate(chunks):
                queue: asyncio.Queue[int] = asyncio.Queue()
                for index in chunk:
                    queue.put_nowait(index)
                group.create_task(self._worker(pool, worker_id, queue))
        finished = all(
            i in self.results and self.results[i].status != "cancelled"
            for i in range(len(self.specs))
        )
        if self.cancel_event.is_set() and not finished:
            self.run.status = "aborted" if self.aborted else "cancelled"
        else:  # also when cancelled after its last episode finished
            self.run.status = "completed"
        self.run.timings["finished_at"] = time.time()
        self._refresh()
        self.save()
        self.broadcast(
            {
                "type": "eval_complete",
                "source": "eval",
                "run_id": self.run.run_id,
                "status": self.run.status,
            }
        )
        return self.run

    async def _worker(self, pool: EnvWorkerPool, worker_id: int, queue: asyncio.Queue[int]) -> None:
        client = f"{self.run.run_id}/w{worker_id}"
        shared = [self.registry.bound(n) for n in self.registry.servers.shared_in(self.graph)]
        async with pool.acquire_specific(worker_id) as handle:
            await _set_attached(shared, client, attach=True)
            recording: asyncio.Future[None] | None = None  # owned here, awaited in turn
            try:
                # Cancelled: episodes not started yet are left missing, never written one
                # by one as "cancelled" records (the run's summary counts them).
                while not queue.empty() and not self.cancel_event.is_set():
                    spec = self.specs[queue.get_nowait()]
                    result = await self._run_one_episode(pool, handle, spec, client)
                    if recording is not None:
                        await recording
                    # Persisting this episode overlaps the simulation of the next one.
                    recording = asyncio.ensure_future(self._record(result))
                    if result.status == "timeout" and not self.cancel_event.is_set():
                        await self._replace_servers(pool, handle)
            finally:
                if recording is not None:
                    await asyncio.shield(recording)
                await asyncio.shield(_set_attached(shared, client, attach=False))

    async def _run_one_episode(
        self, pool: EnvWorkerPool, handle: WorkerHandle, spec: EpisodeSpec, client: str = ""
    ) -> EpisodeResult:
        """Run, and when the worker's server died, restart it and retry with the same seed."""
        attempt = 1
        while True:
            try:
                result = await self._attempt(handle, spec, client)
            except ServerDiedError as exc:  # died while the episode was set on its panel
                result = EpisodeResult(
                    index=spec.index,
                    task=spec.task,
                    episode_index=spec.episode_index,
                    seed=spec.seed,
                    status="exception",
                    error=f"{type(exc).__name__}: {exc}",
                )
            result.attempts = attempt
            if self.cancel_event.is_set() and result.status in RETRYABLE:
                result.status, result.error = "cancelled", "cancelled with the run"
            if self.cancel_event.is_set() or result.status not in RETRYABLE:
                return result
            await self._require_shared()  # a lost shared server ends the run, resumable
            if attempt >= self.config.max_attempts:
                return result
            try:
                dead = await pool.dead_servers(handle)
                if not dead:
                    return result  # the episode failed on its own: no retry
                await pool.restart(handle, dead)
            except Exception as exc:  # the run goes on; this episode keeps its failure
                result.error = f"{result.error}; server restart failed: {exc}"
                return result
            attempt += 1

    async def _attempt(
        self, handle: WorkerHandle, spec: EpisodeSpec, client: str = ""
    ) -> EpisodeResult:
        episode_dir = self.run_dir.create_episode(spec.index)  # its episode.json goes here
        if self.cancel_event.is_set():
            return EpisodeResult(
                index=spec.index,
                task=spec.task,
                episode_index=spec.episode_index,
                seed=spec.seed,
                status="cancelled",
                error="cancelled with the run",
            )
        log_path = self.run_dir.episode_log_path(spec.index)
        log_path.unlink(missing_ok=True)  # a retry or a resume starts the log afresh
        wiring = EpisodeWiring(
            resolver=self.registry,
            env=handle.env,
            env_panel_overrides=handle.env_panel_overrides,
            server_url_overrides=handle.server_url_overrides,
            principles=ExecutionPrinciples(suppress_nav_events=True),
            client=client,
        )
        options = EpisodeOptions(
            step_budget_override=self.config.step_budget,
            per_step_timeout_s=self.config.per_step_timeout_s,
            render=self.config.save_frames,
            log=_EpisodeLog(log_path) if self.config.record_log else None,
            asset_dir=str(self.run_dir.episode_assets_dir(spec.index))
            if self.config.save_frames
            else "",
            cancel=self.cancel_event,
        )
        assert episode_dir.exists()
        return await run_episode(self.graph, spec, wiring, options)

    async def _require_shared(self) -> None:
        """ServerDiedError naming the server and its URL when a shared server is gone."""
        for name in self.registry.servers.shared_in(self.graph):
            health = getattr(self.registry.bound(name), "health", None)
            if health is None:
                continue
            try:
                await health()
            except ServerDiedError as exc:
                raise ServerDiedError(f"shared {exc}") from exc
            except ServerError:  # slow or odd, not gone: the episode keeps its own failure
                continue

    async def _replace_servers(self, pool: EnvWorkerPool, handle: WorkerHandle) -> None:
        """After a timeout a call may still run inside the worker's simulator; it must never
        touch the next episode, so the worker gets fresh servers."""
        try:
            await pool.restart(handle, handle.server_keys())
        except Exception:  # later episodes on this slot record their own failures
            log.exception("could not replace the servers of worker %d", handle.worker_id)

    async def _record(self, result: EpisodeResult) -> None:
        async with self.results_lock:
            self.results[result.index] = result
            now = time.monotonic()
            full = (
                len(self.results) <= FULL_REFRESH_MAX_EPISODES
                or now - self._last_full_refresh >= AGGREGATE_INTERVAL_S
                or len(self.results) == len(self.specs)
            )
            # File writes and aggregates run in a thread: in-flight episodes keep running.
            await asyncio.to_thread(self._persist, result, full)
        self.broadcast(
            {
                "type": "eval_episode_done",
                "source": "eval",
                "run_id": self.run.run_id,
                "episode": result.model_dump(mode="json"),
            }
        )
        self.broadcast(
            {
                "type": "eval_progress",
                "source": "eval",
                "run_id": self.run.run_id,
                "episodes_done": self.run.episodes_done,
                "episodes_total": self.run.episodes_total,
                "success_rate": _mean(self.run, "success"),
            }
        )

    def _persist(self, result: EpisodeResult, full: bool) -> None:
        atomic_write_json(
            self.run_dir.episode_json_path(result.index),
            {
                **result.model_dump(mode="json"),
                "run_id": self.run.run_id,
                "graph_name": self.graph.name,
            },
        )
        self._refresh(full)
        self.save()

    def _refresh(self, full: bool = True) -> None:
        """Recompute from the results sorted by index.

        Counts and per-episode records are always current; the bootstrap/Wilson aggregates
        are recomputed when ``full``: at every boundary up to FULL_REFRESH_MAX_EPISODES
        results, then at most once per AGGREGATE_INTERVAL_S, and always at the end.
        """
        ordered = [self.results[i] for i in sorted(self.results)]
        self.run.episodes = ordered
        self.run.episodes_done = sum(1 for r in ordered if r.status != "cancelled")
        self.run.status_counts = metrics.status_counts(ordered)
        if full:
            self.run.aggregate_metrics = metrics.aggregate_metrics(ordered)
            self.run.aggregate_by_task = metrics.aggregate_by_task(ordered)
            self._last_full_refresh = time.monotonic()
        timeouts = [r.index for r in ordered if r.status == "timeout"]
        reasons = [r for r in self.run.determinism.reasons if not r.startswith("wall-clock")]
        if timeouts:
            reasons.append(f"wall-clock timeouts decided episodes {timeouts}")
        self.run.determinism.reasons = reasons
        self.run.determinism.guaranteed = not reasons

    def save(self) -> None:
        atomic_write_json(self.run_dir.summary_path, self.run.model_dump(mode="json"))


def _require_replicated_env(registry: WorkspaceComponentRegistry, graph: Graph) -> None:
    """Each worker needs its own simulator: a graph's env node set must be replicated."""
    if graph.env is None:
        return
    parallelism = registry.manifest(graph.env.nodeset).parallelism
    if parallelism != "replicated":
        raise ConfigError(
            f"env.nodeset: '{graph.env.nodeset}' is {parallelism}; batch eval needs the "
            "environment node set to be replicated (one simulator per worker)"
        )


async def _set_attached(handles: list[Any], client: str, attach: bool) -> None:
    """Tell shared servers how many workers may send requests (their batching rendezvous)."""
    for handle in handles:
        method = getattr(handle, "attach" if attach else "detach", None)
        if method is None:
            continue
        try:
            await method(client)
        except ServerError:
            if attach:
                raise
            log.warning("could not detach %s from %s (server gone?)", client, handle)


def _mean(run: EvalRun, name: str) -> float | None:
    agg = run.aggregate_metrics.get(name)
    return None if agg is None else agg.mean
