"""EpisodeWorker: one worker of a Ray run, an actor that runs whole episodes itself.

It loads the graph's node sets from the shipped workspace as a node-set server would (each
alone: ``NodeSetCatalogue.load_one``), holds its replicated node sets (the simulator)
in-process, reaches the shared ones through model-actor handles, and runs each episode with
the same ``run_episode`` (LoopRunner / GraphExecutor) as the local engine. In-process calls
of replicated and shared node sets cross the wire encoding (``nodes.boundary``), so a record
equals the local engine's.

The head sends an episode's identity and options; the actor answers with its EpisodeResult,
the episode's firing log (encoded here) and its frames (file name → bytes: per view an mp4
that carries its index), which the head writes into the run folder — except the log where
the actor sees the run folder itself: then it stages the log there and the head renames it
into place (`shared_folder`). The head's work does not grow with episode length. A call may
carry several episodes (``run_batch``): Ray's own cost of a call is about a millisecond of
the head's CPU, so with short episodes on many workers the head batches to keep up. The
actor runs them in order and stops early — after an episode that did not complete (an error
for the run's budget, a timeout after which the head restarts it, a cancel) or once
cancelled between two — and answers those it ran; the head gives the rest back to be handed
out again, at the same attempt.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcanvas.cluster.model_actor import RayModelHandle, load_catalogue
from agentcanvas.cluster.shared_folder import SeenFolders, stage_log
from agentcanvas.eval.episode import (
    CancelEvent,
    EpisodeOptions,
    EpisodeSpec,
    EpisodeWiring,
    run_episode,
)
from agentcanvas.eval.media import recorded_frames
from agentcanvas.fileio import encode_jsonl_line
from agentcanvas.graph.executor import ExecutionPrinciples
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodes.base import NodeSetHandle
from agentcanvas.server.runtime import fix_numeric_threads

LOG_NAME = Path("log.jsonl")


@dataclass
class EpisodeRequest:
    """What the head sends for one episode: identity and the run's episode options."""

    spec: EpisodeSpec
    step_budget: int | None
    per_step_timeout_s: float
    episode_timeout_s: float | None
    save_frames: bool
    record_log: bool
    run_dir: str = ""  # the run folder and its token (`shared_folder`): where the actor
    storage_token: str = ""  # sees that folder, it stages the log there itself


@dataclass
class EpisodeReply:
    """What comes back: the record (JSON), the firing log and the frames."""

    result: dict[str, Any]
    log: bytes = b""  # log.jsonl as the local engine writes it, encoded here, not at the head
    frames: dict[str, bytes] = field(default_factory=dict)
    node_id: str = ""
    log_staged: str | None = None  # the log's temp name in its episode folder, "" for no log
    # (`shared_folder`: the head renames it into place; ``log`` is then empty); None: not staged


class _EncodedLog:
    """The episode's firing log, each entry encoded as the line log.jsonl gets."""

    def __init__(self) -> None:
        self.lines = bytearray()

    def record(self, entry: dict[str, Any]) -> None:
        self.lines += encode_jsonl_line(LOG_NAME, entry)


class EpisodeWorker:
    """The body of a worker actor (wrapped with ``ray.remote`` by the engine)."""

    def __init__(
        self,
        client: str,
        graph: dict[str, Any],
        workspace: str | None,
        active: str | None,
        models: dict[str, Any],
    ) -> None:
        fix_numeric_threads()
        self.instance = uuid.uuid4().hex
        self.client = client
        self.graph = parse_graph(graph, source="the run's graph")
        self.registry = load_catalogue(workspace, active, self.graph.nodesets())
        for name, actor in models.items():
            manifest = self.registry.manifest(name)
            self.registry.bind_handle(name, RayModelHandle(name, actor, manifest))
        self.registry.validate(self.graph)
        self.env_nodeset = self.graph.env.nodeset if self.graph.env else None
        self.overrides: dict[str, NodeSetHandle] = {
            name: self.registry.local_instance(name)
            for name in self.registry.replicated_in(self.graph)
        }
        self.models = [self.registry.bound(name) for name in models]
        self._cancel: CancelEvent | None = None
        self._attached = False
        self._folders = SeenFolders()

    def _cancel_event(self) -> CancelEvent:
        if self._cancel is None:  # made on the actor's event loop
            self._cancel = CancelEvent()
        return self._cancel

    async def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    async def where(self) -> tuple[str, str, str]:
        """The Ray node this actor runs on, the hex id of the placement group it runs in
        ("" for none), as Ray says, and this instance's own id: a restarted actor has a new
        one, so the head can tell it from the instance it killed, which may still answer."""
        from ray.util import get_current_placement_group

        group = get_current_placement_group()
        return await self.node_id(), "" if group is None else str(group.id.hex()), self.instance

    async def cancel(self) -> None:
        """End the episode in flight as ``cancelled`` (the run was cancelled)."""
        self._cancel_event().set()

    async def run_batch(self, requests: list[EpisodeRequest]) -> list[EpisodeReply]:
        """Run ``requests`` in order, stopping after the first episode that did not complete
        or once cancelled; the replies of those that ran, in order."""
        replies: list[EpisodeReply] = []
        for request in requests:
            if self._cancel_event().is_set():
                break
            reply = await self.run(request)
            replies.append(reply)
            if reply.result.get("status") != "completed":
                break
        return replies

    async def run(self, request: EpisodeRequest) -> EpisodeReply:
        """Run one episode here and send back its record, log and frames."""
        await self._attach()
        log = _EncodedLog() if request.record_log else None
        asset_dir = tempfile.mkdtemp(prefix="agentcanvas-frames-") if request.save_frames else ""
        try:
            wiring = EpisodeWiring(
                resolver=self.registry,
                env=self.overrides.get(self.env_nodeset) if self.env_nodeset else None,
                env_panel_overrides=self.overrides,
                principles=ExecutionPrinciples(suppress_nav_events=True),
                client=self.client,
            )
            options = EpisodeOptions(
                step_budget_override=request.step_budget,
                per_step_timeout_s=request.per_step_timeout_s,
                episode_timeout_s=request.episode_timeout_s,
                render=request.save_frames,
                log=log,
                asset_dir=asset_dir,
                cancel=self._cancel_event(),
            )
            async with recorded_frames(asset_dir) as recording:  # one mp4 per view, to ship
                result = await run_episode(self.graph, request.spec, wiring, options)
                await recording.finish(keep=True)  # the head drops what its mode does not keep
            frames = _read_frames(asset_dir)
        finally:
            if asset_dir:
                shutil.rmtree(asset_dir, ignore_errors=True)
        lines = bytes(log.lines) if log is not None else b""
        staged = None if log is None else await asyncio.to_thread(self._stage_log, request, lines)
        return EpisodeReply(
            result=result.model_dump(mode="json"),
            log=lines if staged is None else b"",
            log_staged=staged,
            frames=frames,
            node_id=await self.node_id(),
        )

    def _stage_log(self, request: EpisodeRequest, lines: bytes) -> str | None:
        """The log staged in the run folder (its temp name, "" for none), or None: it is sent
        to the head (off the actor's event loop: a network file system may be slow)."""
        run_dir = self._folders.run_dir(request.run_dir, request.storage_token)
        return None if run_dir is None else stage_log(run_dir, request.spec.index, lines)

    async def _attach(self) -> None:
        """Tell the model actors this worker sends requests (their batching rendezvous)."""
        if self._attached:
            return
        for handle in self.models:
            if isinstance(handle, RayModelHandle):
                await handle.attach(self.client)
        self._attached = True

    async def detach(self) -> None:
        for handle in self.models:
            if isinstance(handle, RayModelHandle):
                await handle.detach(self.client)
        self._attached = False


def _read_frames(asset_dir: str) -> dict[str, bytes]:
    if not asset_dir:
        return {}
    return {p.name: p.read_bytes() for p in sorted(Path(asset_dir).iterdir()) if p.is_file()}
