"""Opening and closing the Ray session of one run (or joining a running cluster).

Without an address a local Ray is started on loopback, sized small (a few CPUs, no
dashboard, a modest object store). ``auto`` joins the cluster that ``ray start`` left on this
machine; ``host:port`` a cluster's GCS; ``ray://host:10001`` connects through Ray Client.
Before ``ray.init`` the address is checked (``connect.check_cluster``): an address where
nothing listens, or a cluster that refuses this process's token, fails at once naming the
cause. On Linux Ray rewrites 127.0.0.1 to the host's network address unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before it is imported: it is, for a local Ray
and a loopback address, so such a session stays on loopback.

A session this process opened (``ray.init``) is closed with ``ray.shutdown`` — the cluster's
own nodes stay up — and, when asked (``quiet_stdout``), sends this process's standard output
to standard error while it is open: Ray's driver prints what other processes publish (a lost
node's raylet log, a dead worker's error) on stdout, which belongs to ``--json``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from agentcanvas.cluster.connect import AUTH_HELP, check_cluster
from agentcanvas.errors import ConfigError

LOOPBACK = "127.0.0.1"
LOCAL_OBJECT_STORE_BYTES = 150 * 1024**2
LOCAL_SESSION_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise ConfigError(
            "engine 'ray' needs Ray: pip install 'agentcanvas[ray]' (or use --engine local)"
        ) from exc
    return ray


class StdoutToStderr:
    """File descriptor 1 pointed at descriptor 2 until ``restore`` (flushing both ways, so
    what was printed before stays on stdout and nothing printed meanwhile reaches it)."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._saved: int | None = os.dup(1)
        os.dup2(2, 1)

    def restore(self) -> None:
        if self._saved is None:
            return
        sys.stdout.flush()  # what Ray printed while redirected goes to stderr, not later
        os.dup2(self._saved, 1)
        os.close(self._saved)
        self._saved = None


@dataclass
class RaySession:
    """A connection to Ray. ``owned``: this process started the local instance;
    ``connected``: this process called ``ray.init`` (and ends it with ``ray.shutdown``)."""

    address: str | None
    owned: bool
    connected: bool = False
    redirect: StdoutToStderr | None = None

    def close(self) -> None:
        ray = import_ray()
        try:
            if self.connected and ray.is_initialized():
                ray.shutdown()  # leaves the cluster (stops a local Ray); its nodes stay
        finally:
            if self.redirect is not None:
                self.redirect.restore()


def open_session(address: str | None, num_cpus: int, *, quiet_stdout: bool = False) -> RaySession:
    """Join ``address`` (auto, ray://..., host:port), an already initialised Ray, or start a
    local one on loopback with ``num_cpus`` CPUs (what the run's placement group needs).
    ``quiet_stdout``: Ray's driver output goes to stderr while the session is open."""
    if is_loopback(address) and "ray" not in sys.modules:  # Ray reads it when imported
        for name, value in LOCAL_SESSION_ENV.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if ray.is_initialized():
        return RaySession(address, owned=False)
    if address:
        check_cluster(address)  # the cause, named, in milliseconds
    redirect = StdoutToStderr() if quiet_stdout else None
    try:
        _init(ray, address, num_cpus)
    except BaseException:
        if redirect is not None:
            redirect.restore()
        raise
    return RaySession(address, owned=not address, connected=True, redirect=redirect)


def _init(ray: Any, address: str | None, num_cpus: int) -> None:
    common: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if not address:
        ray.init(
            address="local",  # a new instance: never join a cluster found on this machine
            num_cpus=max(1, num_cpus),
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            _node_ip_address=LOOPBACK,
            **common,
        )
        return
    try:
        ray.init(address=address, **common)
    except ray.exceptions.AuthenticationError as exc:  # our side: token mode, no token
        raise ConfigError(
            f"ray_address: cannot connect to Ray at {address!r}: RAY_AUTH_MODE=token here "
            f"but this process has no token; {AUTH_HELP} (or unset RAY_AUTH_MODE for a "
            "cluster without authentication)"
        ) from exc
    except (OSError, RuntimeError, ValueError) as exc:  # ConnectionError is an OSError
        raise ConfigError(
            f"ray_address: cannot connect to Ray at {address!r} ({exc}); start a cluster "
            "with `ray start --head` or leave the address out for a local Ray"
        ) from exc


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
