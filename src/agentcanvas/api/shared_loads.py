"""SharedLoads: the shared node sets (models) of queued runs, started off every request.

A shared node set loads in its own server process (a text encoder reads its weights, checks
its batch invariance...), which may take minutes. Nothing waits for that on a request: a
start (or resume) queues the run at once, ``loading``, and this owner starts one task per
loading run that borrows its shared servers from the backend's registry (refcount +1 each,
one launch however many runs ask) and then hands them to the scheduler; the run waits for
admission meanwhile with a reason that names them ("loading the shared model
text_encoder"). Queued runs found at a restart are loaded the same way, so a backend answers
at once after a restart too.

A run cancelled while it loads has its task cancelled, and what the task had borrowed is
given back; a node set that cannot start fails the run with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from agentcanvas.background import TaskOwner
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import Graph
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["SharedLoads"]

log = logging.getLogger(__name__)


class SharedLoads:
    """One task per ``loading`` run of the scheduler, owned here (see the module docstring)."""

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        scheduler: JobScheduler,
        release: Callable[[list[str]], object],
        wake: Callable[[], None],
    ) -> None:
        self.registry = registry
        self.scheduler = scheduler
        self._release = release
        self._wake = wake
        self.tasks = TaskOwner("shared load")

    def start_pending(self) -> None:
        """A task for each loading run that has none yet (after a submit, a resume, a
        restart; each tick as a safety net)."""
        for job in self.scheduler.loading_jobs():
            if self.tasks.get(job.run_id) is None:
                self.tasks.start(self._load(job.run_id, job.run_dir, list(job.loading)), job.run_id)

    def cancel(self, run_id: str) -> None:
        """Stop loading for a run that was cancelled (what it borrowed is given back)."""
        task = self.tasks.get(run_id)
        if task is not None:
            task.cancel()

    async def aclose(self, timeout_s: float) -> None:
        await self.tasks.aclose(timeout_s)

    async def _load(self, run_id: str, run_dir: RunDir, names: list[str]) -> None:
        urls: dict[str, str] = {}
        name = ""
        try:
            graph = await asyncio.to_thread(_frozen_graph, run_dir.root)
            for name in names:
                urls |= await self.registry.ensure_shared_nodesets_for_graph(_only(graph, name))
        except asyncio.CancelledError:
            self._release(sorted(urls))
            raise
        except Exception as exc:  # the run fails with the reason; the backend goes on
            self._release(sorted(urls))
            what = f"the shared model {name}" if name else "its spec.json"
            log.error("run %s: could not start %s: %s", run_id, what, exc)
            self.scheduler.shared_failed(run_id, f"could not start {what}: {exc}")
            self._wake()
            return
        if not self.scheduler.shared_loaded(run_id, urls):  # cancelled meanwhile
            self._release(sorted(urls))
        self._wake()


def _frozen_graph(run_root: Path) -> Graph:
    return RunSpec.read(RunDir(run_root)).graph_model(source=f"run {run_root.name} spec.json")


def _only(graph: Graph, nodeset: str) -> Graph:
    """The graph's nodes of ``nodeset`` (what the registry needs to start that one)."""
    return graph.model_copy(update={"nodes": [n for n in graph.nodes if n.nodeset == nodeset]})
