"""Before ``ray.init``: does the address answer, and does the cluster let this process in?

Ray's own connect hides both causes. Against an address where nothing listens it retries for
a long while; against a cluster with token authentication (the pinned Ray turns it on for
``ray.init``'s local clusters, and for ``ray start --head`` wherever a token file exists) it
gives up after about 20 s with "Failed to connect", the cause (``InvalidAuthToken``) only in
its log. One gRPC call to the cluster's GCS, with the token this process would send, tells
them apart in milliseconds, and the error names the setting to change.

A Ray Client address (``ray://``) is only checked for a listening port: its server is not a
GCS. ``auto`` is resolved as ``ray.init`` resolves it (the cluster ``ray start`` left on this
machine), and token auth is turned on for it when a token exists, as ``ray.init`` does.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from agentcanvas.errors import ConfigError

__all__ = ["AUTH_HELP", "REACH_TIMEOUT_S", "auth_failure", "check_cluster"]

REACH_TIMEOUT_S = 5.0
AUTH_HELP = (
    "set RAY_AUTH_MODE=token and give this process the cluster's token "
    "(~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN), as on the cluster's nodes"
)


def check_cluster(address: str) -> None:
    """ConfigError naming the cause unless a Ray cluster answers at ``address`` and accepts
    this process's credentials (``auto``, ``host:port`` or ``ray://host:port``)."""
    if address.startswith("ray://"):
        _check_port(address)
        return
    gcs = _resolve(address)
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    messages: Any = gcs_service_pb2  # generated code, untyped
    services: Any = gcs_service_pb2_grpc
    channel = grpc.insecure_channel(gcs)
    try:
        stub = services.NodeInfoGcsServiceStub(channel)
        request = messages.GetClusterIdRequest()
        stub.GetClusterId(request, timeout=REACH_TIMEOUT_S, metadata=_auth_metadata())
    except grpc.RpcError as exc:
        raise ConfigError(_refusal(address, gcs, exc)) from None
    finally:
        channel.close()


def auth_failure(address: str, detail: str = "InvalidAuthToken") -> str:
    """The error for a cluster that refused this process's credentials."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode != "token":
        why = f"RAY_AUTH_MODE is {mode!r} here" if mode else "RAY_AUTH_MODE is not set here"
    elif not _auth_metadata():
        why = "RAY_AUTH_MODE=token but this process found no token"
    else:
        why = "the token this process sends is not the cluster's"
    return (
        f"ray_address: cannot connect to Ray at {address!r}: the cluster requires token "
        f"authentication and refused this process ({detail}; {why}); {AUTH_HELP}"
    )


def _refusal(address: str, gcs: str, exc: Any) -> str:
    import grpc

    code, detail = exc.code(), (exc.details() or "").strip()
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return auth_failure(address, detail.split(":")[0] or "unauthenticated")
    prefix = f"ray_address: cannot connect to Ray at {address!r}"
    if code == grpc.StatusCode.UNAVAILABLE:
        return (
            f"{prefix}: nothing that speaks Ray's protocol listens at {gcs} ({_short(detail)});"
            " start the head with `ray start --head --port PORT` there, or fix the address"
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"{prefix}: {gcs} did not answer within {REACH_TIMEOUT_S:g} s (a firewall?)"
    return (
        f"{prefix}: {gcs} is not the cluster's GCS ({code.name}); give the head's --port "
        "(6379 unless changed)"
    )


def _short(detail: str) -> str:
    """gRPC's connect detail, cut to its last reason (e.g. ``Connection refused``)."""
    return detail.rsplit(": ", 1)[-1] or "no answer"


def _resolve(address: str) -> str:
    """``host:port`` of the GCS ``ray.init`` would connect to for ``address``."""
    from ray._private import services

    if address == "auto":
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)  # as ray.init
    try:
        gcs = services.canonicalize_bootstrap_address(address)
    except (ValueError, ConnectionError) as exc:
        raise ConfigError(f"ray_address: {address!r}: {exc}") from None
    if gcs is None:
        raise ConfigError(
            f"ray_address {address!r}: no Ray cluster was started on this machine "
            "(`ray start --head`); give its address, or leave it out for a local Ray"
        )
    return str(gcs)


def _check_port(address: str) -> None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # a form Ray itself will refuse, naming it
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(
            f"ray_address: cannot connect to Ray at {address!r}: nothing listens there "
            f"({exc.strerror or exc}); start the head's Ray Client server (`ray start --head`,"
            " port 10001 unless --ray-client-server-port)"
        ) from None


def _auth_metadata() -> tuple[tuple[str, str], ...]:
    """The gRPC metadata Ray's own clients add (the bearer token when token auth is on)."""
    from ray._private.authentication.grpc_authentication_client_interceptor import (
        _get_authentication_metadata_tuple,
    )

    return tuple(_get_authentication_metadata_tuple())
