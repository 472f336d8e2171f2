"""One episode, start to finish (the design note's ``_run_one_episode``), on one worker.

Set the episode on the worker's env panel → resolve the step budget → run a fresh LoopRunner
under a wall-clock safety net → harvest → evict keyed per-episode state. Six ways it ends
(completed, timeout, exception, error, no_verdict, cancelled); each returns a populated
EpisodeResult with what was harvested so far and why it ended (its ``end_reason``). Only a
cancellation from outside the episode (the whole task being cancelled) and a lost server
(ServerDiedError: the worker retries) propagate.

Every EpisodeResult of a run is made by :func:`episode_result`, also the record of an episode
that ended without running (cancelled before it started, its server or worker lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from agentcanvas.errors import ServerDiedError, ServerTimeoutError, describe
from agentcanvas.eval.config import EndReason, EpisodeResult, EpisodeStatus
from agentcanvas.eval.episode_result import STATUS_OF_END, succeeded
from agentcanvas.graph.executor import (
    EpisodeContext,
    EventSink,
    ExecutionPrinciples,
    ExecutionResult,
    FiringLog,
    NodeResolver,
    call_context,
)
from agentcanvas.graph.loop_runner import LoopRunner
from agentcanvas.graph.model import DEFAULT_STEP_BUDGET, Graph, Node
from agentcanvas.graph.summarize import format_traceback
from agentcanvas.nodes.base import LocalNodeSet, NodeSetHandle
from agentcanvas.nodes.boundary import WireBoundary, is_in_process
from agentcanvas.nodes.handles import SaysIfItEvicts, says_if_it_evicts
from agentcanvas.nodes.manifest import LoadInfo
from agentcanvas.server.deadlines import call_deadline, reset_call_timeout, set_call_timeout
from agentcanvas.server.proxy import Opening, RemoteNodeSet

log = logging.getLogger(__name__)


class CancelEvent(asyncio.Event):
    """The run's cancel flag: an `asyncio.Event` that also calls back when it is set, so the
    episodes in flight are cut short by a callback each, not by a task waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: set[Callable[[], None]] = set()

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:  # one episode's trouble never stops the others' cut, nor the
                log.exception("a cancel callback failed")  # caller that cancels the run

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the event is set (not if it is set already); returns what
        removes it."""
        self._callbacks.add(callback)
        return lambda: self._callbacks.discard(callback)


@dataclass(frozen=True)
class EpisodeSpec:
    """Identity of an episode: position in the run, task, the env's index, derived seed."""

    index: int
    task: str
    episode_index: int
    seed: int
    key: str


@dataclass
class EpisodeWiring:
    """Where one worker's episode runs: its env handle and routing overrides."""

    resolver: NodeResolver
    env: NodeSetHandle | None
    env_panel_overrides: Mapping[str, NodeSetHandle] = field(default_factory=dict)
    server_url_overrides: Mapping[str, str] = field(default_factory=dict)
    principles: ExecutionPrinciples = field(default_factory=ExecutionPrinciples)
    events: EventSink | None = None
    client: str = ""


@dataclass
class EpisodeOptions:
    """Run-wide knobs for each episode."""

    step_budget_override: int | None = None
    per_step_timeout_s: float = 10.0
    episode_timeout_s: float | None = None
    render: bool = False
    log: FiringLog | None = None
    asset_dir: str = ""
    cancel: CancelEvent | None = None
    # The env's firing every episode starts with (`graph.opening.opening_firing`): sent with the
    # panel request when the env is a server.
    opening: tuple[Node, dict[str, Any]] | None = None


CANCELLED_WITH_THE_RUN = "cancelled with the run"


def episode_result(
    spec: EpisodeSpec,
    reason: EndReason,
    error: str | None = None,
    *,
    exc: BaseException | None = None,
) -> EpisodeResult:
    """A record of episode ``spec`` that ended for ``reason`` (its status follows), with its
    ``error`` and the bounded traceback of ``exc``: the record of an episode that ended
    without running, or the start of one that runs (`run_episode` fills it in)."""
    result = EpisodeResult(
        index=spec.index,
        task=spec.task,
        episode_index=spec.episode_index,
        seed=spec.seed,
        status=STATUS_OF_END[reason],
    )
    _end(result, reason, error, exc)
    return result


def _end(
    result: EpisodeResult,
    reason: EndReason,
    error: str | None,
    exc: BaseException | None = None,
) -> None:
    """``result`` ended for ``reason``: its status, end reason, error and traceback."""
    result.status, result.end_reason, result.error = STATUS_OF_END[reason], reason, error
    result.traceback = format_traceback(exc) if exc is not None else None


def mark_cancelled(result: EpisodeResult) -> None:
    """The run's cancel ended ``result`` (what failed then is the cancel's doing)."""
    _end(result, "cancelled", CANCELLED_WITH_THE_RUN)
    result.failed_node = None


def episode_timeout_s(options: EpisodeOptions, budget: int) -> float:
    """The episode's wall-clock safety net: ``episode_timeout_s`` if set, else
    ``budget × per_step_timeout_s``."""
    if options.episode_timeout_s is not None:
        return options.episode_timeout_s
    return budget * options.per_step_timeout_s


def resolve_step_budget(override: int | None, env_budget: int | None, graph: Graph) -> int:
    """API override → env value → graph value → DEFAULT_STEP_BUDGET."""
    for budget in (override, env_budget, graph.step_budget):
        if budget is not None:
            return budget
    return DEFAULT_STEP_BUDGET


async def set_episode(
    env: NodeSetHandle,
    graph: Graph,
    spec: EpisodeSpec,
    render: bool,
    opening: Opening | None = None,
) -> LoadInfo:
    """Reset the panel to its defaults (no episode depends on the one before it on this
    worker), push the cascade fields, task, index and seed, ``play``, then ``on_load`` — in
    one round trip to the env's server, which also carries the episode's ``opening`` call
    when the env is a server (`RemoteNodeSet.panel_episode`)."""
    defaults = dict(graph.env.fields) if graph.env else {}
    defaults.pop("task_id", None)
    fields: list[tuple[str, Any]] = list(defaults.items())
    fields += [("task_id", spec.task), ("episode_index", spec.episode_index), ("seed", spec.seed)]
    if render and env.manifest.panel and env.manifest.panel.field("render"):
        fields.append(("render", True))
    if opening is not None and isinstance(env, RemoteNodeSet):
        return await env.panel_episode(fields, opening)
    return await env.panel_episode(fields)


async def _start(
    env: NodeSetHandle,
    graph: Graph,
    spec: EpisodeSpec,
    options: EpisodeOptions,
    episode: EpisodeContext,
) -> LoadInfo:
    """set_episode under the per-step deadline, or the env's declared ``episode_start_s``
    when longer (a simulator that takes seconds to build and reset); an in-process env under
    the same deadline a server's call has."""
    start_s = max(options.per_step_timeout_s, env.manifest.episode_start_s)
    deadline = asyncio.timeout(start_s if is_in_process(env) else None)
    opening: Opening | None = None
    if options.opening is not None:
        node, inputs = options.opening
        opening = (node.node_name, node.config, inputs, call_context(node, 0, episode))
    try:
        with call_deadline(start_s):
            async with deadline:
                return await set_episode(env, graph, spec, options.render, opening)
    except TimeoutError as exc:
        if not deadline.expired():
            raise
        raise ServerTimeoutError(
            f"in-process env {env.name!r} did not start the episode within {start_s:g} s "
            f"(per-step timeout, or the env's episode_start_s)"
        ) from exc


async def run_episode(
    graph: Graph, spec: EpisodeSpec, wiring: EpisodeWiring, options: EpisodeOptions
) -> EpisodeResult:
    """Run one episode; failures become data on the returned record."""
    started = time.perf_counter()
    result = episode_result(spec, "exception")  # until it ends otherwise
    runner: LoopRunner | None = None
    deadline = set_call_timeout(options.per_step_timeout_s)  # every server call's deadline
    episode = EpisodeContext(spec.key, spec.seed, spec.task, options.asset_dir, wiring.client)
    propagating = False  # a failure that ends the episode's task (cancelled, server died)
    try:
        info = await _start(wiring.env, graph, spec, options, episode) if wiring.env else None
        if info is not None:
            result.episode_id, result.scene_id = info.episode_id, info.scene_id
            result.instruction = info.instruction
        budget = resolve_step_budget(
            options.step_budget_override, info.step_budget if info else None, graph
        )
        result.step_budget = budget
        if budget < 1:
            _end(result, "error", f"resolved step budget {budget} < 1 refused")
            return result
        runner = _make_runner(wiring, options)
        status, outcome = await _run_guarded(runner, graph, episode, budget, options)
        _fill(result, status, outcome, runner, episode_timeout_s(options, budget))
    except ServerDiedError:
        propagating = True
        raise  # the worker restarts the server and retries the episode
    except ServerTimeoutError as exc:  # a panel call hit its deadline: wall clock decided
        _end(result, "timeout", describe(exc), exc)
        _harvest_partial(result, runner)
    except Exception as exc:  # a failure of the episode is data on its record
        _end(result, "exception", describe(exc), exc)
        _harvest_partial(result, runner)
    except BaseException:
        propagating = True
        raise
    finally:
        try:
            if isinstance(wiring.env, RemoteNodeSet):  # an opening call the episode never made
                await _settle_opening(wiring.env, result, propagating)
        finally:
            result.duration_s = round(time.perf_counter() - started, 6)
            await _evict(graph, wiring, spec.key)
            reset_call_timeout(deadline)
    if result.status != "completed":  # harvested before it ended: kept, never scored
        result.partial_metrics, result.metrics = result.metrics, {}
    return result


async def _settle_opening(env: RemoteNodeSet, result: EpisodeResult, propagating: bool) -> None:
    """Drop the answer of an opening call the episode ended without making: waited for
    (nothing of this episode may run on the server beside the next one) unless the episode's
    task is ending anyway; one that does not come makes the episode a timeout, so that the
    worker gets fresh servers."""
    if propagating:
        env.opening.drop()
        return
    try:
        await env.opening.settle()
    except ServerTimeoutError as exc:
        _end(result, "timeout", describe(exc), exc)


def _make_runner(wiring: EpisodeWiring, options: EpisodeOptions) -> LoopRunner:
    overrides = dict(wiring.env_panel_overrides)
    # In-process node sets get the per-step deadline a server's calls have.
    principles = dataclasses.replace(
        wiring.principles, local_call_timeout_s=options.per_step_timeout_s
    )
    return LoopRunner(
        wiring.resolver,
        env_panel_overrides=overrides,
        server_url_overrides=wiring.server_url_overrides,
        principles=principles,
        log=options.log,
        events=wiring.events,
    )


async def _run_guarded(
    runner: LoopRunner,
    graph: Graph,
    episode: EpisodeContext,
    budget: int,
    options: EpisodeOptions,
) -> tuple[EpisodeStatus | None, ExecutionResult | None]:
    """Race the loop against the timeout and the run's cancel event. The loop runs in a task
    of its own (its context apart from the worker's), awaited under the episode's timeout;
    the cancel event's callback expires that timeout at once — no task waits on the event."""
    loop = asyncio.ensure_future(runner.run(graph, episode, step_budget_override=budget))
    scope = asyncio.timeout(episode_timeout_s(options, budget))
    cut = False

    def cut_short() -> None:
        nonlocal cut
        if scope.expired():  # timed out already (its loop still unwinding): a timeout
            return
        scope.reschedule(asyncio.get_running_loop().time())
        cut = True

    remove: Callable[[], None] | None = None
    try:
        async with scope:
            if options.cancel is not None:
                remove = options.cancel.on_set(cut_short)
                if options.cancel.is_set():
                    cut_short()
            return None, await loop
    except Exception:  # the scope's TimeoutError, or what the loop raised while cut short
        if not scope.expired():  # the loop's own failure (its own TimeoutError too)
            raise
        return ("cancelled" if cut else "timeout"), None
    finally:
        if remove is not None:
            remove()
        if not loop.done():
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)


def _fill(
    result: EpisodeResult,
    status: EpisodeStatus | None,
    outcome: ExecutionResult | None,
    runner: LoopRunner,
    timeout_s: float,
) -> None:
    """The record of an episode the loop ended (``outcome``), or the cancel or the safety
    net cut short (``status``)."""
    if status is not None:
        if status == "cancelled":
            _end(result, "cancelled", CANCELLED_WITH_THE_RUN)
        else:
            _end(
                result,
                "timeout",
                f"wall-clock timeout after {timeout_s:g} s (safety net; not a score)",
            )
        partial = _harvest_partial(result, runner)
        if status == "timeout" and partial is not None and partial.in_flight:
            result.failed_node = partial.in_flight[0]  # what the episode was waiting for
        return
    assert outcome is not None
    result.steps, result.metrics = outcome.steps, outcome.metrics
    result.node_errors = dict(outcome.node_errors)
    result.node_tracebacks = dict(outcome.node_tracebacks)
    if outcome.timed_out:
        nodes = ", ".join(outcome.timed_out)
        _end(result, "timeout", f"a node-set call hit its wall-clock deadline: {nodes}")
        result.failed_node = min(outcome.timed_out)
    elif outcome.node_errors:
        _end(result, "error", "node errors in: " + ", ".join(sorted(outcome.node_errors)))
        result.failed_node = min(outcome.node_errors)
    elif not outcome.metrics:
        error = "the graph completed without metrics (no graphOut value): no verdict"
        _end(result, "no_verdict", error)
    else:
        _end(result, _completed(outcome), None)


def _completed(outcome: ExecutionResult) -> EndReason:
    """Why a completed episode ended: success, else the env's done or the step budget."""
    if succeeded(outcome.metrics):
        return "success"
    return "env_done" if outcome.done_signalled else "budget_exhausted"


def _harvest_partial(result: EpisodeResult, runner: LoopRunner | None) -> ExecutionResult | None:
    """What the episode had when it was cut short (None: it never started its loop)."""
    if runner is None or runner.executor is None:
        return None
    partial = runner.executor.result()
    result.steps, result.metrics = partial.steps, partial.metrics
    result.node_errors = dict(partial.node_errors)
    result.node_tracebacks = dict(partial.node_tracebacks)
    return partial


async def _evict(graph: Graph, wiring: EpisodeWiring, key: str) -> None:
    """Drop this episode's entries from node-set-owned keyed containers (worker-safe)."""
    for nodeset in graph.nodesets():
        handle = wiring.env_panel_overrides.get(nodeset) or wiring.resolver.handle_for(
            nodeset, wiring.server_url_overrides.get(nodeset)
        )
        if says_if_it_evicts(handle) and not cast(SaysIfItEvicts, handle).evicts:  # no state
            continue
        local = handle.inner if isinstance(handle, WireBoundary) else handle
        with contextlib.suppress(Exception):  # a dead server has nothing left to evict
            if isinstance(local, LocalNodeSet):  # synchronous: nothing to shield, no task
                local.evict_here(key)
            else:
                await asyncio.shield(handle.evict(key))
