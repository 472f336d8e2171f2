"""Workspace code on other nodes: the user's node sets and graphs travel in a runtime env.

A worker node needs only the installed ``agentcanvas`` package (and the libraries its node
sets import). The workspace's ``graph_nodes/`` and ``graphs/`` (and the active overlay's, under
``active/``) are copied into a small staging folder that Ray ships as the actors'
``working_dir``: each actor starts inside an unpacked copy of it and loads the node sets from
there, as a node-set server loads them from the workspace. Run outputs never travel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHIPPED = ("graph_nodes", "graphs")
ACTIVE = "active"
ENV_PREFIXES = ("AGENTCANVAS_", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")


@dataclass
class ShippedWorkspace:
    """A staging folder and the runtime env that ships it; ``close`` removes the folder."""

    folder: Path
    has_active: bool

    def runtime_env(self) -> dict[str, Any]:
        """The actors' runtime env: the staging folder uploaded to the cluster (a ``gcs://``
        URI every node downloads), and the run's ``AGENTCANVAS_*`` settings."""
        env_vars = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
        env_vars.pop("AGENTCANVAS_HOME", None)  # the actors' workspace is the shipped one
        return {"working_dir": upload(self.folder), "env_vars": env_vars}

    def active_dir(self) -> str | None:
        """Where the overlay lies inside an actor's working directory (relative)."""
        return ACTIVE if self.has_active else None

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def stage_workspace(workspace: Path, active: Path | None) -> ShippedWorkspace:
    """Copy the workspace's (and overlay's) node sets and graphs into a staging folder."""
    folder = Path(tempfile.mkdtemp(prefix="agentcanvas-ship-"))
    _copy(workspace, folder)
    if active is not None:
        _copy(active, folder / ACTIVE)
    (folder / "README").write_text("agentcanvas workspace code shipped to Ray actors\n")
    return ShippedWorkspace(folder, active is not None)


def _copy(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, ignore=IGNORED)


def upload(folder: Path) -> str:
    """Upload ``folder`` to the connected cluster and return its ``gcs://`` URI.

    Ray takes a local ``working_dir`` only in ``ray.init``'s job-level runtime env; a run
    that joins an already connected driver (a notebook, the tests, a backend) ships per
    actor, so the folder is uploaded the way ``ray.init`` does it. This helper is Ray's
    own, internal, hence the exact pin of Ray in ``pyproject.toml``.
    """
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    env = upload_working_dir_if_needed({"working_dir": str(folder)}, include_gitignore=False)
    uri: str = env["working_dir"]
    return uri
