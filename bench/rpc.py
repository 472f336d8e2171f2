"""Per-call overhead of a proxied node next to Gymnasium ``AsyncVectorEnv``'s per-step overhead.

    .venv/bin/python bench/rpc.py [--quick] [--calls N] [--cpus any|same|split]

Measured in one run, on this machine, one call at a time (latency, not throughput):

- ``in-process``: ``LocalNodeSet.call`` of the bench node (the floor);
- ``proxied``: the same node served by ``auto_host`` and called through ``RemoteNodeSet``
  (the call socket, `server.rpc_client`: an abstract unix socket, msgpack header + raw array frames;
  the bench node set is replicated, so the server runs the call on the connection's thread);
- ``AsyncVectorEnv``: ``envs.step`` of a trivial ``gymnasium.Env`` in a subprocess
  (``num_envs=1``), pickling over a pipe (``shared_memory=False``) or writing the
  observation to shared memory (``shared_memory=True``).

Three payloads: ``no-op`` (a node with no outputs; for the vector env, a scalar observation),
``obs`` (a 64×64×3 uint8 observation, as a step returns it) and ``images`` (two 224×224×3
uint8 camera images, a VLA policy's input: 301 KB); and the same images *sent* to a node
(``images in``: a policy's request). ``proxied`` is the default call path,
whose big arrays (requests' and replies') go through the connection's shared memory
(`server.rpc_shared`);
``proxied, streamed`` turns that off (``AGENTCANVAS_CALL_SHARED_MEMORY=0``: the arrays travel
on the unix socket). The bench node set is written to a temporary workspace that the server
finds through ``AGENTCANVAS_HOME``.

A second table splits a proxied no-op call into layers, to show where the time goes: the
wire format alone, the server answering a pre-encoded request on a plain socket, the rpc
client (deadline, dead-server watch, encode/decode), the full call, and the same call over the
server's HTTP route (uvicorn + httpx; the per-call path was HTTP before it was ZeroMQ, and
ZeroMQ before it was this socket, for comparison).

``--cpus same`` puts caller and callees on one CPU (the figures are then CPU cost alone;
every thread of the server is pinned, once its connections' threads exist);
``--cpus split`` puts them on two (every call then pays cross-CPU wake-ups, as parallel
workers on their own cores do). Rows are measured in interleaved rounds, so a change of load
during the run hits them alike. Goal: proxied within 2x of AsyncVectorEnv's pipe
step (shm=False) with ``--cpus same``, within 1.3x with ``--cpus split``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import os
import socket
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import httpx
import numpy as np

from agentcanvas import wire
from agentcanvas.nodes.base import CallContext, NodeSetHandle
from agentcanvas.server import protocol, rpc_framing
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from agentcanvas.server.registry import WorkspaceComponentRegistry

OBS_SHAPE = (64, 64, 3)
IMAGES_SHAPE = (2, 224, 224, 3)
PAYLOADS = {"no-op": (), "obs": OBS_SHAPE, "images": IMAGES_SHAPE}
NODESET_NAME = "bench_rpc"
NODESET_SOURCE = textwrap.dedent(
    f'''
    """bench/rpc.py: a no-op node and a step node returning a 64x64x3 uint8 observation."""
    import numpy as np
    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    class State:
        def __init__(self):
            self.obs = np.random.default_rng(0).integers(0, 256, {OBS_SHAPE}, dtype=np.uint8)
            self.images = np.random.default_rng(0).integers(0, 256, {IMAGES_SHAPE}, dtype=np.uint8)

    NODESET = NodeSet("{NODESET_NAME}", parallelism="replicated", state_factory=State)

    @NODESET.node("noop")
    def noop(inputs, config, state, ctx):
        return {{}}

    @NODESET.node("step", inputs=[PortSpec(name="action", type="int", required=False)],
                  outputs=[PortSpec(name="obs", type="array"), PortSpec(name="reward"),
                           PortSpec(name="done", type="bool")])
    def step(inputs, config, state, ctx):
        return {{"obs": state.obs, "reward": 0.0, "done": False}}

    @NODESET.node("images", inputs=[PortSpec(name="action", type="int", required=False)],
                  outputs=[PortSpec(name="obs", type="array"), PortSpec(name="reward"),
                           PortSpec(name="done", type="bool")])
    def images(inputs, config, state, ctx):
        return {{"obs": state.images, "reward": 0.0, "done": False}}

    @NODESET.node("act", inputs=[PortSpec(name="images", type="array")],
                  outputs=[PortSpec(name="action", type="int")])
    def act(inputs, config, state, ctx):
        return {{"action": int(inputs["images"][0, 0, 0, 0])}}
    '''
)
PATHS = (
    "in-process",
    "proxied",
    "proxied, streamed",
    "AsyncVectorEnv shm=False",
    "AsyncVectorEnv shm=True",
)
NODES = {"no-op": "noop", "obs": "step", "images": "images"}
LAYER_PREFIXES = ("wire", "server", "+", "HTTP")
N_ROUNDS = 10
CTX = CallContext("bench", 0)


class ObsEnv(gym.Env[np.ndarray, Any]):
    """The vector-env counterpart of the bench node: returns a fixed observation."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.observation_space = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.obs = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.obs, 0.0, False, False, {}


@dataclass(frozen=True)
class Stats:
    median_us: float
    p99_us: float

    @classmethod
    def of(cls, samples_ns: list[int]) -> Stats:
        ordered = sorted(samples_ns)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return cls(statistics.median(ordered) / 1e3, p99 / 1e3)


@dataclass
class Row:
    """One thing to time: ``fn()`` is a call, or returns an awaitable when ``is_async``."""

    fn: Callable[[], Any]
    is_async: bool
    samples_ns: list[int] = field(default_factory=list)

    async def run(self, n_calls: int, keep: bool = True) -> None:
        for _ in range(n_calls):
            start = time.perf_counter_ns()
            if self.is_async:
                await self.fn()
            else:
                self.fn()
            if keep:
                self.samples_ns.append(time.perf_counter_ns() - start)


async def measure(rows: dict[str, Row], n_calls: int) -> dict[str, Stats]:
    """Interleaved rounds: each row runs a slice of its calls per round, so a change in the
    machine's load during the run hits every row alike (the ratios are what matter)."""
    for row in rows.values():
        await row.run(max(20, n_calls // 10), keep=False)  # warm-up
    for _ in range(N_ROUNDS):
        for row in rows.values():
            await row.run(max(1, n_calls // N_ROUNDS))
    return {label: Stats.of(row.samples_ns) for label, row in rows.items()}


@dataclass(frozen=True)
class Placement:
    """Which CPUs the caller and the callees (server, vector-env workers) may run on.

    ``any``: the scheduler decides. ``same``: everything on one CPU, so the figures are CPU
    cost without cross-CPU wake-ups. ``split``: caller on one CPU, callees on another, so every
    call pays a cross-CPU wake-up (expensive in a VM) on both sides.
    """

    caller: set[int] | None
    callee: set[int] | None

    @classmethod
    def named(cls, name: str) -> Placement:
        cpus = sorted(os.sched_getaffinity(0))
        if name == "same":
            return cls({cpus[0]}, {cpus[0]})
        if name == "split":
            if len(cpus) < 2:
                raise SystemExit("--cpus split needs two CPUs")
            return cls({cpus[0]}, {cpus[1]})
        return cls(None, None)

    def pin_caller(self) -> None:
        if self.caller is not None:
            os.sched_setaffinity(0, self.caller)

    def pin_callee(self, pid: int | None) -> None:
        """Every thread the process has now (a server's connection threads are made by its
        accept thread, whose affinity they inherit: pin again once they exist)."""
        if self.callee is None or pid is None:
            return
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task), self.callee)


@contextlib.contextmanager
def vector_envs(placement: Placement) -> Iterator[dict[str, Any]]:
    """The four AsyncVectorEnvs, forked before any event loop or server exists."""
    envs = {
        f"AsyncVectorEnv shm={shm} {payload}": gym.vector.AsyncVectorEnv(
            [functools.partial(ObsEnv, shape)], shared_memory=shm, context="fork"
        )
        for shm in (False, True)
        for payload, shape in PAYLOADS.items()
    }
    try:
        for env in envs.values():
            for process in env.processes:
                placement.pin_callee(process.pid)
            env.reset(seed=0)
        yield envs
    finally:
        for env in envs.values():
            env.close()


async def bench(
    workspace: Path, envs: dict[str, Any], n_calls: int, placement: Placement
) -> dict[str, Stats]:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    local = registry.local_instance(NODESET_NAME)
    launcher = LocalProcessLauncher(env={"AGENTCANVAS_HOME": str(workspace)})
    server = await launcher.launch(NODESET_NAME, 0)
    placement.pin_callee(server.pid)
    manifest = await fetch_manifest(server.url)
    remote = RemoteNodeSet(NODESET_NAME, server.url, manifest)
    streamed = RemoteNodeSet(NODESET_NAME, server.url, manifest)
    (await streamed._calls()).pool.shared = False  # this one's connections attach no memory
    try:
        for node in ("step", "images"):
            expected = (await local.call(node, {}, {"action": 0}, CTX))["obs"]
            for proxy in (remote, streamed):
                got = (await proxy.call(node, {}, {"action": 0}, CTX))["obs"]
                assert got.tobytes() == expected.tobytes(), "the observation did not round-trip"
        assert all(c.shared is not None for c in (await remote._calls()).pool._idle)
        assert all(c.shared is None for c in (await streamed._calls()).pool._idle)
        actions = np.zeros(1, dtype=np.int64)
        rows = {
            label: Row(functools.partial(env.step, actions), False) for label, env in envs.items()
        }
        handles: tuple[tuple[str, NodeSetHandle], ...] = (
            ("in-process", local),
            ("proxied", remote),
            ("proxied, streamed", streamed),
        )
        images = np.random.default_rng(1).integers(0, 256, IMAGES_SHAPE, dtype=np.uint8)
        for label, handle in handles:
            rows[f"{label} images in"] = Row(
                functools.partial(handle.call, "act", {}, {"images": images}, CTX), True
            )
            for payload, node in NODES.items():
                inputs = {} if payload == "no-op" else {"action": 0}
                rows[f"{label} {payload}"] = Row(
                    functools.partial(handle.call, node, {}, inputs, CTX), True
                )
        async with layer_rows(server.url, remote) as layers:
            rows |= layers
            for row in rows.values():  # every connection (and its server thread) made...
                await row.run(3, keep=False)
            placement.pin_callee(server.pid)  # ... so that all of them are pinned
            return await measure(rows, n_calls)
    finally:
        await remote.close()
        await streamed.close()
        await server.stop()
        await local.close()


@contextlib.asynccontextmanager
async def layer_rows(url: str, remote: RemoteNodeSet) -> AsyncIterator[dict[str, Row]]:
    """A proxied no-op call, layer by layer (see the module docstring)."""
    args = {"node": "noop", "config": {}, "inputs": {}, "ctx": CTX.__dict__}
    call, noop = {"id": 1, "op": "call", "args": args}, {"id": 1, "ok": {"outputs": {}}}
    obs = {"id": 1, "ok": {"outputs": {"obs": np.zeros(OBS_SHAPE, np.uint8)}}}
    client = await remote._calls()  # the layer under RemoteNodeSet.call, on purpose
    raw = await asyncio.to_thread(rpc_framing.blocking_connection, client.endpoint)
    request = wire.encode(call)
    obs_args = {"node": "step", "config": {}, "inputs": {"action": 0}, "ctx": CTX.__dict__}
    obs_request = wire.encode({"id": 1, "op": "call", "args": obs_args})
    loop = asyncio.get_running_loop()

    async def raw_call(message: list[wire.Buffer] = request) -> list[memoryview]:
        """A pre-encoded request on a blocking socket, answered: the server and the socket."""
        rpc_framing.send_message(raw, message)
        await _readable(loop, raw)
        return rpc_framing.recv_message(raw)

    try:
        async with httpx.AsyncClient(base_url=url) as http:
            http_body = wire.dumps({k: v for k, v in args.items() if k != "node"})
            yield {
                "wire: encode + decode, request and answer": Row(
                    lambda: [wire.decode(wire.encode(x)) for x in (call, noop)], False
                ),
                "wire: the same for the 64x64x3 answer": Row(
                    lambda: wire.decode(wire.encode(obs)), False
                ),
                "server: pre-encoded request on a raw socket": Row(raw_call, True),
                "server: the same, the 64x64x3 step": Row(
                    functools.partial(raw_call, obs_request), True
                ),
                "+ RpcClient (deadline, death watch, wire)": Row(
                    lambda: client.request("call", args, "/call/noop", 10.0, protocol.CallReply),
                    True,
                ),
                "+ RemoteNodeSet.call": Row(lambda: remote.call("noop", {}, {}, CTX), True),
                "HTTP /call/noop (uvicorn + httpx)": Row(
                    lambda: http.post(
                        "/call/noop",
                        content=http_body,
                        headers={"content-type": wire.WIRE_CONTENT_TYPE},
                    ),
                    True,
                ),
            }
    finally:
        raw.close()


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Wait in the event loop (as the client does) until ``sock`` has bytes to read."""
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), ready.set_result, None)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


def run(n_calls: int, placement: Placement) -> dict[str, Stats]:
    placement.pin_caller()
    with (
        tempfile.TemporaryDirectory(prefix="agentcanvas-bench-") as tmp,
        vector_envs(placement) as envs,
    ):
        package = Path(tmp) / "graph_nodes" / NODESET_NAME
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(NODESET_SOURCE)
        return asyncio.run(bench(Path(tmp), envs, n_calls, placement))


def print_tables(table: dict[str, Stats]) -> None:
    print(f"{'payload':<8} {'path':<26} {'median µs':>10} {'p99 µs':>10}")
    for payload in PAYLOADS:
        for path in PATHS:
            s = table[f"{path} {payload}"]
            print(f"{payload:<8} {path:<26} {s.median_us:>10.1f} {s.p99_us:>10.1f}")
    print("\nproxied / AsyncVectorEnv (goal: <= 2.0x with --cpus same, <= 1.3x with split)")
    for payload in PAYLOADS:
        for path in ("proxied", "proxied, streamed"):
            proxied = table[f"{path} {payload}"]
            for shm in (False, True):
                ave = table[f"AsyncVectorEnv shm={shm} {payload}"]
                ratio, ratio_p99 = proxied.median_us / ave.median_us, proxied.p99_us / ave.p99_us
                print(
                    f"  {payload:<6} {path:<17} vs shm={shm!s:<5}  "
                    f"median {ratio:5.2f}x   p99 {ratio_p99:5.2f}x"
                )
    print("\nthe same two images sent to a node (a policy's input; no vector-env counterpart)")
    for path in ("in-process", "proxied", "proxied, streamed"):
        s = table[f"{path} images in"]
        print(f"  {path:<26} {s.median_us:>10.1f} µs median {s.p99_us:>10.1f} µs p99")
    print(f"\nwhere a proxied no-op call goes (call socket; HTTP: {http_implementation()})")
    print(f"  {'layer':<44} {'median µs':>10} {'p99 µs':>10}")
    for label, s in table.items():
        if label.startswith(LAYER_PREFIXES):
            print(f"  {label:<44} {s.median_us:>10.1f} {s.p99_us:>10.1f}")


def http_implementation() -> str:
    """What uvicorn's ``http="auto"`` picks in this environment (the server's, too)."""
    return "httptools" if importlib.util.find_spec("httptools") else "h11 (pure Python)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls, for a smoke run")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per row")
    parser.add_argument(
        "--cpus",
        choices=["any", "same", "split"],
        default="any",
        help="CPU placement of caller and callees (see Placement)",
    )
    args = parser.parse_args(argv)
    n_calls = args.calls or (300 if args.quick else 5000)
    warnings.simplefilter("ignore")
    print(
        f"bench/rpc.py: {n_calls} timed calls per row in {N_ROUNDS} interleaved rounds, "
        f"--cpus {args.cpus}; python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    print_tables(run(n_calls, Placement.named(args.cpus)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
