"""Per-call cost of the policy_server node next to openpi's own client, on the same server.

    .venv/bin/python bench/policy_client.py [--calls N]

The server is the openpi reference server of the tests (``tests/support/openpi_reference.py
server``: openpi-client's ``msgpack_numpy``, a 3-row chunk per request), run in
``.venv-openpi`` (``make install`` makes it) on 127.0.0.1. Each side sends the same
observation N times, one request at a time, after 20 warm-up calls:

- ``openpi``: ``openpi_client.WebsocketClientPolicy.infer`` (in ``.venv-openpi``);
- ``ours (node)``: ``policy_server.act`` through ``LocalNodeSet.call``, as a run calls it,
  ``execute_steps=1`` so every call is a request (config validation, request building, the
  chunk bookkeeping included);
- ``ours (client)``: ``policy_protocol.PolicyClient.infer`` alone.

Payloads: ``state`` (8 floats and a prompt) and ``images`` (plus two 224x224x3 uint8
pictures, as a LIBERO policy gets). The sides take turns, ``--rounds`` times (loopback
latency drifts on a shared machine; turns keep the drift out of the ratio). Per round the
median µs of each side; the table shows the median over rounds and the ratio = ours (node) /
openpi with its range over rounds. Goal: <= 1.2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.policy_protocol import PolicyClient
from agentcanvas.server.registry import WorkspaceComponentRegistry

REPO = Path(__file__).resolve().parents[1]
OPENPI_PYTHON = REPO / ".venv-openpi" / "bin" / "python"
REFERENCE = REPO / "tests" / "support" / "openpi_reference.py"
sys.path.insert(0, str(REFERENCE.parent))


def payload(kind: str) -> dict[str, object]:
    """openpi_reference.payload, here (that module imports openpi_client)."""
    rng = np.random.default_rng(3)
    obs: dict[str, object] = {
        "observation/state": rng.normal(size=8).astype(np.float32),
        "prompt": "pick it up",
    }
    if kind == "images":
        for key in ("observation/image", "observation/wrist_image"):
            obs[key] = rng.integers(0, 255, size=(224, 224, 3), dtype=np.uint8)
    return obs


async def ours(url: str, n: int, kind: str) -> tuple[list[float], list[float]]:
    obs = payload(kind)
    inputs = {"obs": obs["observation/state"], "prompt": obs["prompt"]}
    if kind == "images":
        inputs["image"] = obs["observation/image"]
        inputs["wrist_image"] = obs["observation/wrist_image"]
    with tempfile.TemporaryDirectory() as tmp:
        registry = WorkspaceComponentRegistry(workspace=Path(tmp))
        registry.scan_all()
        node = LocalNodeSet(registry.nodeset("policy_server"))
        config = {"url": url, "execute_steps": 1}
        node_times = []
        for i in range(n + 20):
            ctx = CallContext(node_id="policy", step=i, episode_key="ep", client="w0")
            start = time.perf_counter()
            await node.call("act", config, inputs, ctx)
            if i >= 20:
                node_times.append(1e6 * (time.perf_counter() - start))
        await node.close()
    client = PolicyClient(url)
    await client.connect(10)
    client_times = []
    for i in range(n + 20):
        start = time.perf_counter()
        await client.infer(obs, 10)
        if i >= 20:
            client_times.append(1e6 * (time.perf_counter() - start))
    await client.close()
    return node_times, client_times


def _openpi(url: str, calls: int, kind: str) -> float:
    done = subprocess.run(
        [str(OPENPI_PYTHON), str(REFERENCE), "bench", url, str(calls), kind],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    times: list[float] = json.loads(done.stdout)
    return statistics.median(times)


def _rounds(url: str, calls: int, kind: str, rounds: int) -> list[tuple[float, float, float]]:
    """(openpi, ours node, ours client) median µs of each round."""
    out = []
    for _ in range(rounds):
        theirs = _openpi(url, calls, kind)
        node, client = asyncio.run(ours(url, calls, kind))
        out.append((theirs, statistics.median(node), statistics.median(client)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="per side and round (1000)")
    parser.add_argument("--rounds", type=int, default=5, help="turns of the sides (default 5)")
    args = parser.parse_args()
    if not OPENPI_PYTHON.exists():
        print(f"{OPENPI_PYTHON} is missing: run `make install`")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen([str(OPENPI_PYTHON), str(REFERENCE), "server", str(port_file)])
        try:
            while not (port_file.exists() and port_file.read_text()):
                time.sleep(0.05)
            url = f"ws://127.0.0.1:{port_file.read_text()}"
            print(f"{'payload':<8} {'openpi µs':>10} {'ours node µs':>13} {'ours client µs':>15} "
                  f"{'ratio (range over rounds)':>26}")  # fmt: skip
            for kind in ("state", "images"):
                rows = _rounds(url, args.calls, kind, args.rounds)
                theirs, mine, raw = (statistics.median(col) for col in zip(*rows, strict=True))
                ratios = sorted(node / openpi for openpi, node, _ in rows)
                spread = f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
                print(f"{kind:<8} {theirs:>10.0f} {mine:>13.0f} {raw:>15.0f} {spread:>26}")
        finally:
            server.kill()
            server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
