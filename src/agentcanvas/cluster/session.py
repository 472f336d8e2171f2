"""Opening and closing the Ray session of one run (or joining a running cluster).

Without an address a local Ray is started on loopback, sized small (a few CPUs, no
dashboard, a modest object store). ``auto`` joins the cluster that ``ray start`` left on this
machine; ``ray://host:10001`` connects through Ray Client. On this kind of machine Ray would
otherwise resolve the host's network address: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and
``_node_ip_address="127.0.0.1"`` keep a local session on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import Any

from agentcanvas.errors import ConfigError

LOOPBACK = "127.0.0.1"
LOCAL_OBJECT_STORE_BYTES = 150 * 1024**2
LOCAL_SESSION_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
REACH_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise ConfigError(
            "engine 'ray' needs Ray: pip install 'agentcanvas[ray]' (or use --engine local)"
        ) from exc
    return ray


@dataclass
class RaySession:
    """A connection to Ray; ``owned`` when this process started the local instance."""

    address: str | None
    owned: bool

    def close(self) -> None:
        ray = import_ray()
        if self.owned and ray.is_initialized():
            ray.shutdown()


def open_session(address: str | None, num_cpus: int) -> RaySession:
    """Join ``address`` (auto, ray://..., host:port), an already initialised Ray, or start a
    local one on loopback with ``num_cpus`` CPUs (what the run's placement group needs)."""
    if is_loopback(address) and "ray" not in sys.modules:  # Ray reads it when imported
        for name, value in LOCAL_SESSION_ENV.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if ray.is_initialized():
        return RaySession(address, owned=False)
    common: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if address:
        try:
            check_reachable(address)
            ray.init(address=address, **common)
        except (OSError, RuntimeError, ValueError) as exc:  # ConnectionError is an OSError
            raise ConfigError(
                f"ray_address: cannot connect to Ray at {address!r} ({exc}); start a cluster "
                "with `ray start --head` or leave the address out for a local Ray"
            ) from exc
        return RaySession(address, owned=False)
    ray.init(
        address="local",  # a new instance: never join a cluster found on this machine
        num_cpus=max(1, num_cpus),
        include_dashboard=False,
        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        _node_ip_address=LOOPBACK,
        **common,
    )
    return RaySession(None, owned=True)


def check_reachable(address: str) -> None:
    """OSError unless something accepts a connection at ``address``'s host and port: Ray's
    own connect to a dead address retries for minutes (``auto`` is Ray's to resolve)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # auto, or a form Ray itself will refuse
    socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()


def is_loopback(address: str | None) -> bool:
    """No address (a local Ray) or one on 127.0.0.1 / localhost: Ray must not resolve it to
    the host's network address."""
    if not address:
        return True
    host = address.removeprefix("ray://").rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.")


def node_addresses() -> list[str]:
    """The address every alive node of the cluster reports, and the GCS this driver uses."""
    ray = import_ray()
    nodes = [str(n["NodeManagerAddress"]) for n in ray.nodes() if n.get("Alive")]
    return [*nodes, str(ray.get_runtime_context().gcs_address).rsplit(":", 1)[0]]
