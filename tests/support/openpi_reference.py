"""openpi-client itself, on either end of the policy-server protocol (run in .venv-openpi:
openpi-client needs numpy < 2, so this file imports nothing of ours).

``python openpi_reference.py client URL OUT.npz``: ``WebsocketClientPolicy`` connects to URL
and sends the observations of ``observations()``; the metadata and the replies go to OUT.npz
(``metadata`` as msgpack bytes, ``reply<i>/<key>`` arrays).

``python openpi_reference.py bench URL N PAYLOAD``: ``WebsocketClientPolicy.infer`` N times
with the observation ``payload(PAYLOAD)`` ("state" or "images"); prints the per-call times
(µs) as JSON.

``python openpi_reference.py server PORT_FILE``: a policy server packing with openpi's
``msgpack_numpy`` (the shape of openpi's ``WebsocketPolicyServer``): metadata first, then
each request answered with ``{"actions": <chunk>, "echo": <the request>}``, where the chunk
is 3 rows made from the request's ``observation/state`` (row r: state * (r + 1), its first
``action_dim`` entries when the request says so); a request without that key gets the
traceback as text, and the connection is closed with 1011. With ``REQUEST_LOG=<file>`` in
the environment, the sha256 of every request message is appended to that file, one a line.
"""

from __future__ import annotations

import asyncio
import sys
import traceback

import numpy as np
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy


def observations() -> list[dict]:
    rng = np.random.default_rng(7)
    return [
        {"obs": rng.normal(size=4).astype(np.float32)},
        {"obs": np.zeros(4, dtype=np.float32)},
        {"obs": rng.normal(size=4).astype(np.float32), "prompt": "ignored by the policy"},
    ]


def client(url: str, out: str) -> None:
    policy = WebsocketClientPolicy(url)
    arrays = {
        "metadata": np.frombuffer(msgpack_numpy.packb(policy.get_server_metadata()), np.uint8)
    }
    for i, obs in enumerate(observations()):
        reply = policy.infer(obs)
        for key, value in reply.items():
            arrays[f"reply{i}/{key}"] = np.asarray(value)
    np.savez(out, **arrays)


def payload(kind: str) -> dict:
    """The observation of bench/policy_client.py: a state, or a state and two 224 px images."""
    rng = np.random.default_rng(3)
    obs = {"observation/state": rng.normal(size=8).astype(np.float32), "prompt": "pick it up"}
    if kind == "images":
        for key in ("observation/image", "observation/wrist_image"):
            obs[key] = rng.integers(0, 255, size=(224, 224, 3), dtype=np.uint8)
    return obs


def bench(url: str, n: int, kind: str) -> None:
    import json
    import time

    policy = WebsocketClientPolicy(url)
    obs = payload(kind)
    for _ in range(20):
        policy.infer(obs)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        policy.infer(obs)
        times.append(1e6 * (time.perf_counter() - start))
    print(json.dumps(times))


async def server(port_file: str) -> None:
    import hashlib
    import os

    import websockets.asyncio.server as ws_server
    import websockets.frames

    packer = msgpack_numpy.Packer()
    log = os.environ.get("REQUEST_LOG")

    async def handler(ws) -> None:
        await ws.send(packer.pack({"policy": "openpi reference", "rows": 3}))
        while True:
            try:
                message = await ws.recv()
                if log:
                    with open(log, "a") as f:
                        f.write(hashlib.sha256(message).hexdigest() + "\n")
                obs = msgpack_numpy.unpackb(message)
                state = np.asarray(obs["observation/state"])
                state = state[: int(obs.get("action_dim", len(state)))]
                chunk = np.stack([state * (r + 1) for r in range(3)])
                await ws.send(packer.pack({"actions": chunk, "echo": obs}))
            except websockets.ConnectionClosed:
                return
            except Exception:
                await ws.send(traceback.format_exc())
                await ws.close(websockets.frames.CloseCode.INTERNAL_ERROR, "Internal server error")
                return

    async with ws_server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as srv:
        port = next(iter(srv.sockets)).getsockname()[1]
        with open(port_file, "w") as f:
            f.write(str(port))
        await srv.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "bench":
        bench(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        asyncio.run(server(sys.argv[2]))
