"""BatchedInferenceServer, driven by real asyncio tasks and a handler that records its batches.

Time is a :class:`ManualClock` the test sets: a queue that is not full and not "every
attached client waiting" can then only flush when the test moves the clock past the cap, so
the assertions need no wall-clock timing. The last tests run a recurrent node set through a
real ``auto_host`` server and the graph executor (hidden state round trips).
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.errors import ServerError
from agentcanvas.graph.executor import EpisodeContext, ExecutionResult, GraphExecutor
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.batched_inference import BatchedInferenceServer, config_hash
from agentcanvas.server.batching import FlushPolicy
from agentcanvas.server.proxy import RemoteNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry

DEADLINE_S = 10.0  # only a broken server ever waits this long
CAP_S = 0.010


class ManualClock:
    """The server's clock, moved only by the test; counts how often the server read it."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now_s


class RecordingHandler:
    """A batch handler that records each batch, its config and the clock when it ran.

    ``gate``: when given, each forward pass waits for it (a long forward pass, held open by
    the test). Items named ``"poison"`` make the batch raise; ``n_outputs`` overrides how many
    outputs a batch returns.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        gate: threading.Event | None = None,
        n_outputs: int | None = None,
        work_s: float = 0.0,
    ) -> None:
        self.clock, self.gate, self.n_outputs, self.work_s = clock, gate, n_outputs, work_s
        self.batches: list[list[Any]] = []
        self.configs: list[dict[str, Any]] = []
        self.ran_at_s: list[float] = []
        self.started = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, items: list[Any], config: dict[str, Any]) -> list[Any]:
        with self._lock:
            self.batches.append(list(items))
            self.configs.append(config)
            self.ran_at_s.append(self.clock())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.started.set()
        try:
            if self.gate is not None:
                assert self.gate.wait(DEADLINE_S), "the test never opened the gate"
            if self.work_s:
                time.sleep(self.work_s)  # the forward pass's compute, not a synchronisation
            if "poison" in items:
                raise RuntimeError(f"model failed on a batch of {len(items)}")
            n = len(items) if self.n_outputs is None else self.n_outputs
            return [("out", item) for item in items][:n] + [("extra", None)] * (n - len(items))
        finally:
            with self._lock:
                self.in_flight -= 1


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``predicate`` on the event loop until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.001)


def server_with(
    clients: list[str], policy: FlushPolicy | None = None
) -> tuple[BatchedInferenceServer, ManualClock]:
    clock = ManualClock()
    server = BatchedInferenceServer(policy or FlushPolicy(cap_s=CAP_S), clock=clock)
    for client in clients:
        server.attach(client)
    return server, clock


def submit(
    server: BatchedInferenceServer,
    handler: RecordingHandler,
    client: str,
    item: Any,
    fn: str = "embed",
    config: dict[str, Any] | None = None,
) -> asyncio.Task[Any]:
    return asyncio.create_task(server.submit(fn, config or {}, item, client, handler))


async def results(*tasks: Awaitable[Any]) -> list[Any]:
    async with asyncio.timeout(DEADLINE_S):
        return list(await asyncio.gather(*tasks))


async def outcomes(*tasks: Awaitable[Any]) -> list[Any]:
    """Results or the exceptions raised, in order."""
    async with asyncio.timeout(DEADLINE_S):
        return list(await asyncio.gather(*tasks, return_exceptions=True))


# -- flush when every attached client waits; the cap -------------------------------------


@pytest.mark.parametrize("k", [2, 4, 8])
async def test_k_clients_submitting_together_make_one_forward_pass_of_k(k: int) -> None:
    clients = [f"run/w{i}" for i in range(k)]
    server, clock = server_with(clients, FlushPolicy(max_batch=8, cap_s=CAP_S))
    handler = RecordingHandler(clock)
    outputs = await results(*(server.submit("embed", {}, c, c, handler) for c in clients))
    assert outputs == [("out", c) for c in clients]  # each caller gets its own output
    assert [sorted(b) for b in handler.batches] == [sorted(clients)]
    assert handler.ran_at_s == [0.0]  # the clock never moved: no cap was waited for
    assert (server.forward_passes, server.requests_served) == (1, k)


async def test_one_attached_client_is_served_at_once() -> None:
    server, clock = server_with(["run/w0"])
    handler = RecordingHandler(clock)
    for item in ("a", "b", "c"):
        assert await results(server.submit("embed", {}, item, "run/w0", handler)) == [("out", item)]
    assert handler.batches == [["a"], ["b"], ["c"]]
    assert handler.ran_at_s == [0.0, 0.0, 0.0]


async def test_when_one_client_never_submits_the_others_flush_at_the_cap() -> None:
    server, clock = server_with(["w0", "w1", "w2"], FlushPolicy(cap_s=CAP_S, window_s=0.050))
    handler = RecordingHandler(clock)
    first = submit(server, handler, "w0", "a")
    await asyncio.sleep(0)  # a is queued at t = 0
    clock.now_s = 0.004
    second = submit(server, handler, "w1", "b")  # w2 never submits
    reads = clock.reads
    await until(lambda: clock.reads >= reads + 4, "the waiters to look at the clock again")
    assert handler.batches == []  # 2 of 3 waiting, before the cap: nothing flushed
    clock.now_s = CAP_S  # the cap, counted from a's arrival (b's would be 0.014)
    assert await results(first, second) == [("out", "a"), ("out", "b")]
    assert handler.batches == [["a", "b"]]
    # flushed at the cap, far before the note's 50 ms window after the last arrival
    assert handler.ran_at_s == [CAP_S]


async def test_attach_and_detach_count_clients() -> None:
    server = BatchedInferenceServer()
    assert [server.attach("a"), server.attach("b"), server.attach("a")] == [1, 2, 2]
    assert [server.detach("a"), server.detach("a"), server.detach("b")] == [1, 1, 0]
    assert server.stats()["attached"] == 0


# -- key separation ----------------------------------------------------------------------


async def test_function_names_and_configs_never_share_a_batch_identical_configs_do() -> None:
    clients = ["w0", "w1", "w2", "w3"]
    server, clock = server_with(clients)
    handler = RecordingHandler(clock)
    checkpoint_a = {"checkpoint": "a", "temperature": 1.0}
    same_as_a = {"temperature": 1.0, "checkpoint": "a"}  # the same config, other key order
    checkpoint_b = {"checkpoint": "b", "temperature": 1.0}
    tasks = []
    for i, client in enumerate(clients):
        written_as = checkpoint_a if i < 2 else same_as_a
        tasks += [
            submit(server, handler, client, f"embed/a:{client}", "embed", written_as),
            submit(server, handler, client, f"embed/b:{client}", "embed", checkpoint_b),
            submit(server, handler, client, f"act/a:{client}", "act", checkpoint_a),
        ]
    outputs = await results(*tasks)
    sent = [f"{key}:{c}" for c in clients for key in ("embed/a", "embed/b", "act/a")]
    assert outputs == [("out", item) for item in sent]
    assert config_hash(checkpoint_a) == config_hash(same_as_a) != config_hash(checkpoint_b)
    # three keys, three passes of four: every client waited on each key
    assert sorted(sorted(b) for b in handler.batches) == [
        [f"{key}:{c}" for c in clients] for key in ("act/a", "embed/a", "embed/b")
    ]
    ran_with = {
        b[0].split(":")[0]: cfg for b, cfg in zip(handler.batches, handler.configs, strict=True)
    }
    assert ran_with["embed/b"] == checkpoint_b  # each batch runs with its own config


# -- failures ----------------------------------------------------------------------------


async def test_a_failing_batch_fails_each_of_its_requests_and_the_next_batch_works() -> None:
    server, clock = server_with(["w0", "w1", "w2"])
    handler = RecordingHandler(clock)
    failed = [
        submit(server, handler, c, item)
        for c, item in [("w0", "fine"), ("w1", "poison"), ("w2", "also fine")]
    ]
    for outcome in await outcomes(*failed):
        assert isinstance(outcome, RuntimeError)
        assert str(outcome) == "model failed on a batch of 3"
    again = await results(*(submit(server, handler, c, c) for c in ("w0", "w1", "w2")))
    assert again == [("out", "w0"), ("out", "w1"), ("out", "w2")]
    assert server.forward_passes == 2 and server.requests_served == 3


@pytest.mark.parametrize("n_outputs", [1, 3])
async def test_a_handler_returning_the_wrong_number_of_outputs_fails_the_requests(
    n_outputs: int,
) -> None:
    server, clock = server_with(["w0", "w1"])
    handler = RecordingHandler(clock, n_outputs=n_outputs)
    tasks = [submit(server, handler, c, c) for c in ("w0", "w1")]
    for outcome in await outcomes(*tasks):
        assert isinstance(outcome, ServerError)
        assert f"returned {n_outputs} outputs for 2 inputs" in str(outcome)
    assert server.requests_served == 0


# -- cancellation ------------------------------------------------------------------------


async def test_a_request_cancelled_while_it_waits_is_not_passed_to_the_handler() -> None:
    server, clock = server_with(["w0", "w1", "w2"], FlushPolicy(max_batch=2, cap_s=CAP_S))
    handler = RecordingHandler(clock)
    gone = submit(server, handler, "w0", "gone")
    await asyncio.sleep(0)  # queued and waiting (1 of 3 clients, batch not full)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    # two more fill the batch of 2: the cancelled request must not take a slot
    assert await results(*(submit(server, handler, c, c) for c in ("w1", "w2"))) == [
        ("out", "w1"),
        ("out", "w2"),
    ]
    assert handler.batches == [["w1", "w2"]]


async def test_cancelling_the_caller_mid_forward_neither_strands_its_batch_nor_frees_the_lock() -> (
    None
):
    server, clock = server_with(["w0", "w1", "w2"], FlushPolicy(max_batch=2, cap_s=CAP_S))
    gate = threading.Event()
    handler = RecordingHandler(clock, gate=gate)
    waiter = submit(server, handler, "w0", "a")
    await asyncio.sleep(0)
    flusher = submit(server, handler, "w1", "b")  # fills the batch: its caller runs the pass
    await until(handler.started.is_set, "the forward pass to start")
    flusher.cancel()
    for _ in range(3):
        await asyncio.sleep(0)  # let the cancellation land
    # the pass still runs in its thread: the lock must still cover it
    assert handler.in_flight == 1 and server._inference_lock.locked()
    gate.set()
    assert await results(waiter) == [("out", "a")]  # the other request got its output
    with pytest.raises(asyncio.CancelledError):
        await flusher
    assert not server._inference_lock.locked()
    server.detach("w0")
    server.detach("w1")
    assert await results(submit(server, handler, "w2", "c", fn="other")) == [("out", "c")]
    assert handler.batches == [["a", "b"], ["c"]] and handler.max_in_flight == 1


# -- one forward pass in flight ----------------------------------------------------------


async def test_the_inference_lock_keeps_one_forward_pass_in_flight() -> None:
    server = BatchedInferenceServer(FlushPolicy(kind="none"))
    handler = RecordingHandler(work_s=0.02)
    # six keys flush at once: without the lock their passes would overlap in threads
    calls = [server.submit(f"fn{i}", {"i": i}, i, f"w{i}", handler) for i in range(6)]
    assert await results(*calls) == [("out", i) for i in range(6)]
    assert len(handler.batches) == 6
    assert handler.max_in_flight == 1


async def test_requests_queued_behind_a_running_pass_go_into_one_pass() -> None:
    # Every request below is due on arrival (its queue is past the cap) while another key's
    # pass holds the lock: the batch is taken when the lock frees, so they share one pass
    # instead of one pass each.
    server, clock = server_with([f"w{i}" for i in range(6)], FlushPolicy(max_batch=8, cap_s=CAP_S))
    gate = threading.Event()
    handler = RecordingHandler(clock, gate=gate)
    blocker = submit(server, handler, "w0", "blocker", fn="other")
    await asyncio.sleep(0)
    clock.now_s = 1.0  # the blocker's queue is past its cap: it flushes and holds the lock
    await until(handler.started.is_set, "the first forward pass to start")
    queued = [submit(server, handler, "w1", "r1")]
    await asyncio.sleep(0)
    clock.now_s = 1.0 + 2 * CAP_S
    queued += [submit(server, handler, f"w{i}", f"r{i}") for i in range(2, 6)]
    await asyncio.sleep(0)
    gate.set()
    await until(lambda: len(handler.batches) >= 2, "the pass after the blocker")
    clock.now_s = 2.0  # releases whatever a split batch left behind, so a failure is quick
    await results(blocker, *queued)
    assert handler.batches == [["blocker"], [f"r{i}" for i in range(1, 6)]]


async def test_the_clients_of_a_pass_that_just_ended_get_the_cap_to_join_the_next() -> None:
    # w0, w1 are in a pass; w2, w3 queue behind it and their cap runs out meanwhile. When the
    # pass ends, w0 and w1 come straight back: all four share the next pass, instead of two
    # groups alternating in half-full passes.
    server, clock = server_with(["w0", "w1", "w2", "w3"])
    gate = threading.Event()
    handler = RecordingHandler(clock, gate=gate)
    first = [submit(server, handler, c, f"a:{c}") for c in ("w0", "w1")]
    await asyncio.sleep(0)
    clock.now_s = CAP_S  # the cap: w0 and w1 go without w2 and w3
    await until(handler.started.is_set, "the first pass to start")
    behind = [submit(server, handler, c, f"b:{c}") for c in ("w2", "w3")]
    await asyncio.sleep(0)
    reads = clock.reads
    clock.now_s = 3 * CAP_S  # their cap runs out while the first pass still runs
    await until(lambda: clock.reads >= reads + 4, "w2 and w3 to find their queue due")
    gate.set()
    assert await results(*first) == [("out", "a:w0"), ("out", "a:w1")]
    back = [submit(server, handler, c, f"c:{c}") for c in ("w0", "w1")]
    await until(lambda: len(handler.batches) >= 2, "the second pass")
    clock.now_s = 1.0  # releases whatever a split left behind, so a failure is quick
    await results(*behind, *back)
    assert [sorted(b) for b in handler.batches] == [
        ["a:w0", "a:w1"],
        ["b:w2", "b:w3", "c:w0", "c:w1"],
    ]


# -- hidden state round trips through a real auto_host server ----------------------------

RECURRENT_NODESET = textwrap.dedent(
    '''
    """recurrent: a batched recurrent cell whose state rides hidden_in -> hidden_out."""

    import numpy as np

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="recurrent", parallelism="shared")
    MIX = np.linspace(-1.0, 1.0, 8)


    @NODESET.batched_node(
        "cell",
        inputs=[PortSpec(name="x", type="float"),
                PortSpec(name="hidden_in", type="array", required=False)],
        outputs=[PortSpec(name="y", type="float"), PortSpec(name="hidden_out", type="array")],
    )
    def cell(items, config, state):
        """h' = tanh(0.9 roll(h) + 0.1 sin(x) MIX); h0 comes from the episode seed."""
        outputs = []
        for inputs, ctx in items:
            hidden = inputs.get("hidden_in")
            if hidden is None:
                hidden = np.random.default_rng(ctx.episode_seed).normal(size=8)
            hidden = np.tanh(0.9 * np.roll(hidden, 1) + 0.1 * np.sin(float(inputs["x"])) * MIX)
            outputs.append({"y": float(hidden @ MIX), "hidden_out": hidden})
        return outputs
    '''
)
N_EPISODES = 6
N_STEPS = 12


def recurrent_graph() -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": "recurrent_loop",
            "step_budget": N_STEPS,
            "nodes": [
                {"id": "n", "type": "core.counter"},
                {"id": "rnn", "type": "recurrent.cell"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "n.count", "target": "rnn.x"},
                {"source": "rnn.hidden_out", "target": "rnn.hidden_in", "next_iteration": True},
                {"source": "rnn.y", "target": "out.y"},
            ],
        }
    )


def episode(index: int, run: str, client: str = "") -> EpisodeContext:
    """Episode ``index`` of a run: a fresh key per run (core.counter counts per key)."""
    return EpisodeContext(key=f"{run}:ep{index}", seed=1000 + index, client=client)


async def run_episode(registry: WorkspaceComponentRegistry, ctx: EpisodeContext) -> ExecutionResult:
    async with asyncio.timeout(DEADLINE_S * 3):
        return await GraphExecutor(recurrent_graph(), registry, episode=ctx).run()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recurrent_workspace")
    package = root / "graph_nodes" / "recurrent"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(RECURRENT_NODESET, encoding="utf-8")
    return root


def scanned(workspace: Path) -> WorkspaceComponentRegistry:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    assert registry.load_errors == {}
    return registry


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    """A registry whose ``recurrent`` calls go to one real auto_host server."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTCANVAS_HOME", str(workspace))  # where the server finds the node set
        patch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
        patch.delenv("AGENTCANVAS_FLUSH_POLICY", raising=False)
        registry = scanned(workspace)
        try:
            await registry.ensure_shared_nodesets_for_graph(recurrent_graph())
            yield registry
        finally:
            await registry.shutdown_all()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def in_process(workspace: Path) -> dict[int, ExecutionResult]:
    """The reference: every episode run in this process, one after the other."""
    registry = scanned(workspace)
    try:
        return {i: await run_episode(registry, episode(i, "in-process")) for i in range(N_EPISODES)}
    finally:
        await registry.close_locals()


async def server_stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=DEADLINE_S) as client:
        response = await client.get("/stats")
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("n_workers", [1, 3])
async def test_hidden_state_round_trips_through_the_server_exactly_as_in_process(
    served: WorkspaceComponentRegistry, in_process: dict[int, ExecutionResult], n_workers: int
) -> None:
    handle = served.bound("recurrent")
    assert isinstance(handle, RemoteNodeSet)  # every call goes over HTTP to the server
    chunks = [list(c) for c in np.array_split(np.arange(N_EPISODES), n_workers)]
    remote: dict[int, ExecutionResult] = {}

    async def worker(k: int) -> None:
        client = f"roundtrip/w{k}"
        await handle.attach(client)
        try:
            for index in chunks[k]:
                ctx = episode(int(index), f"{n_workers}-workers", client)
                remote[int(index)] = await run_episode(served, ctx)
        finally:
            await handle.detach(client)

    before = await server_stats(handle.url)
    async with asyncio.TaskGroup() as group:
        for k in range(n_workers):
            group.create_task(worker(k))
    after = await server_stats(handle.url)

    for index in range(N_EPISODES):
        got, want = remote[index], in_process[index]
        assert (got.status, got.steps, got.node_errors) == ("completed", N_STEPS, {})
        assert got.metrics == want.metrics  # the last y, bit for bit
        hidden, want_hidden = got.outputs["rnn"]["hidden_out"], want.outputs["rnn"]["hidden_out"]
        assert hidden.dtype == np.float64
        assert np.array_equal(hidden.view(np.uint64), want_hidden.view(np.uint64)), index
    # the episodes differ, so no episode could have been handed another one's state
    assert len({r.metrics["y"] for r in remote.values()}) == N_EPISODES
    n_requests = after["requests_served"] - before["requests_served"]
    n_passes = after["forward_passes"] - before["forward_passes"]
    assert n_requests == N_EPISODES * N_STEPS
    if n_workers == 1:
        assert n_passes == n_requests  # one client: nothing to coalesce, nothing waited for
    else:
        assert n_passes < n_requests  # concurrent episodes did share forward passes
