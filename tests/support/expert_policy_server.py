"""A policy server for tests: MetaWorld's scripted experts behind the openpi protocol.

``python expert_policy_server.py PORT_FILE`` listens on 127.0.0.1 (a free port, written to
PORT_FILE) and answers ``{"observation/state": obs, "prompt": task}`` with
``{"actions": [action]}`` (a chunk of one row; ``CHUNK=k`` in the environment: k rows, the
expert's action repeated, as a chunking policy would send) plus openpi's ``server_timing``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentcanvas.nodesets.metaworld_expert import ExpertState, expert_action
from agentcanvas.policy_protocol import serve_policy


async def main(port_file: Path) -> None:
    experts = ExpertState()
    rows = int(os.environ.get("CHUNK", "1"))

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        action = expert_action(
            experts, str(obs["prompt"]), np.array(obs["observation/state"])
        )  # a writable copy: the experts write into it
        chunk = np.repeat(action[None, :], rows, axis=0)
        return {
            "actions": chunk,
            "server_timing": {"infer_ms": 1e3 * (time.perf_counter() - start)},
        }

    server = await serve_policy(infer, {"policy": "metaworld_expert"}, "127.0.0.1", 0)
    port = next(iter(server.sockets)).getsockname()[1]
    port_file.write_text(str(port))
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
