"""Process-wide numeric settings that make results repeatable (DESIGN.md § 5 rule 4)."""

from __future__ import annotations

import os
import sys

from agentcanvas import envsettings

__all__ = [
    "DEFAULT_THREADS",
    "THREAD_ENV_VARS",
    "child_thread_env",
    "fix_numeric_threads",
    "numeric_thread_count",
]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
DEFAULT_THREADS = envsettings.NUM_THREADS.default


def numeric_thread_count() -> int:
    """Threads per process for numeric libraries (env ``AGENTCANVAS_NUM_THREADS``, default 1)."""
    return envsettings.NUM_THREADS.get()


def child_thread_env() -> dict[str, str]:
    """Environment entries fixing BLAS/OpenMP threads in a child before it imports them."""
    n = str(numeric_thread_count())
    return {name: os.environ.get(name, n) for name in THREAD_ENV_VARS}


def fix_numeric_threads() -> None:
    """Fix thread counts here; torch is only touched when it is already imported."""
    for name, value in child_thread_env().items():
        os.environ.setdefault(name, value)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(numeric_thread_count())
