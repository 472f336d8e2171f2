"""Episode seeds derive from episode identity, never from a worker slot (DESIGN.md § 5 rule 1).

``episode_seed(run_seed, task, episode_index)`` = the first 8 bytes of
SHA-256(``"agentcanvas-v1|{run_seed}|{task}|{episode_index}"``) as a big-endian integer,
reduced modulo 2**31 so every simulator accepts it.
"""

from __future__ import annotations

import hashlib

SEED_MODULUS = 2**31


def episode_seed(run_seed: int, task: str, episode_index: int) -> int:
    """The documented seed of episode ``(task, episode_index)`` in a run seeded ``run_seed``."""
    text = f"agentcanvas-v1|{run_seed}|{task}|{episode_index}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % SEED_MODULUS
