"""ClusterReservations: the placement groups a backend holds for its queued Ray-engine runs.

The scheduler says what it wants (``want``: a run, its cluster address, its plan) and what it
no longer needs (``release``), and reads where each reservation stands (``get``); those three
are quick and never touch Ray. ``refresh`` does all the Ray work — connect, create the
groups, see which are placed, read what the cluster has free, remove released groups — and
blocks while it does: the backend's async shell runs it in a thread (``api.app``), so a slow
or lost cluster never stalls the event loop or the local runs' admission.

Ray is imported by the first ``refresh`` that has something to do: a backend with no Ray
run never imports it. One process holds one Ray connection, so runs on another cluster wait
until nothing is wanted on the current one, which is then left — also when idle: Ray ends a
driver whose cluster's GCS stays unreachable past its reconnect timeout, and a backend that
holds nothing there should not be exposed to that.
The connection is opened from a worker thread, where Ray installs no SIGTERM handler of its
own (the backend's shutdown stays the server's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentcanvas.cluster.placement import PlacementPlan, describe_wait, group_name, group_view
from agentcanvas.cluster.run_group import cluster_free, create_group, remove_group
from agentcanvas.cluster.session import import_ray, open_session
from agentcanvas.errors import ConfigError

__all__ = ["ClusterReservations", "Reservation", "ReservationState"]

ReservationState = Literal["connecting", "pending", "ready", "failed"]


@dataclass(frozen=True)
class Reservation:
    """Where one run's reservation stands; ``waiting`` says what for (``/queue``)."""

    address: str
    plan: PlacementPlan
    state: ReservationState = "connecting"
    group_id: str | None = None
    waiting: str = ""
    error: str = ""

    def as_json(self) -> dict[str, Any]:
        return group_view(self.plan, self.state, self.group_id)


@dataclass
class _Held:
    """A reservation and, once created, its group and the ref that resolves when placed."""

    reservation: Reservation
    group: Any = None
    ready: Any = None


@dataclass
class ClusterReservations:
    """Reservations by run id; thread-safe (``refresh`` runs in a worker thread)."""

    _held: dict[str, _Held] = field(default_factory=dict)
    _doomed: list[Any] = field(default_factory=list)  # released groups not removed yet
    _address: str | None = None  # the cluster this process is connected to
    _owns_session: bool = False  # we called ray.init (not an in-process run before us)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _io: threading.Lock = field(default_factory=threading.Lock)  # one refresh at a time

    # -- the scheduler's side: quick, no Ray ---------------------------------------------
    def want(self, run_id: str, address: str, plan: PlacementPlan) -> None:
        """Reserve ``plan`` for ``run_id`` on the cluster at ``address`` (at next refresh)."""
        with self._lock:
            self._held[run_id] = _Held(Reservation(address, plan, waiting=_connecting(address)))

    def release(self, run_id: str) -> None:
        """The run no longer needs its group (cancelled, ended): it is removed at next
        refresh, its actors with it. Unknown runs are ignored."""
        with self._lock:
            held = self._held.pop(run_id, None)
            if held is not None and held.group is not None:
                self._doomed.append(held.group)

    def get(self, run_id: str) -> Reservation | None:
        with self._lock:
            held = self._held.get(run_id)
            return None if held is None else held.reservation

    def waiting_for(self, run_id: str) -> str | None:
        """What the run's group still waits for; None once Ray has placed it."""
        reservation = self.get(run_id)
        if reservation is None:
            return "ray: no placement group requested for this run"
        return None if reservation.state == "ready" else reservation.waiting or reservation.state

    def failure(self, run_id: str) -> str | None:
        """Why the run's group cannot be had (its cluster unreachable); None otherwise."""
        reservation = self.get(run_id)
        return reservation.error if reservation and reservation.state == "failed" else None

    def group_id(self, run_id: str) -> str | None:
        reservation = self.get(run_id)
        return None if reservation is None else reservation.group_id

    def view(self, run_id: str) -> dict[str, Any] | None:
        """The reservation for ``/queue``: state, group id, bundles, strategy."""
        reservation = self.get(run_id)
        return None if reservation is None else reservation.as_json()

    def busy(self) -> bool:
        """Whether a refresh has anything to do (reservations, removals, a connection)."""
        with self._lock:
            return bool(self._held or self._doomed or self._address)

    # -- Ray's side: blocking, in a worker thread ----------------------------------------
    def refresh(self) -> bool:
        """Connect, create, poll, remove; whether any reservation changed state."""
        with self._io:
            with self._lock:
                doomed, self._doomed = self._doomed, []
                held = dict(self._held)
            for group in doomed:
                remove_group(group)
            if not any(h.reservation.address == self._address for h in held.values()):
                self._disconnect()  # nothing (more) wanted there: free for another cluster
            if not held:
                return False
            address = self._address or next(iter(held.values())).reservation.address
            if not self._connect(address, held):
                return True
            return self._update(address, held)

    def close(self) -> None:
        """Remove every group and leave the cluster (the backend stops)."""
        with self._lock:
            self._doomed += [h.group for h in self._held.values() if h.group is not None]
            self._held.clear()
        self.refresh()

    def _connect(self, address: str, held: dict[str, _Held]) -> bool:
        if self._address is not None:
            return True
        try:
            ray = import_ray()
            self._owns_session = not ray.is_initialized()  # else an in-process run's: kept
            open_session(address, 0)
        except ConfigError as exc:
            error = str(exc)
            failed = {k: h for k, h in held.items() if h.reservation.address == address}
            self._store(failed, lambda r, h: replace(r, state="failed", error=error))
            return False
        self._address = address
        return True

    def _disconnect(self) -> None:
        if self._address is None:
            return
        self._address = None
        ray = import_ray()
        if self._owns_session and ray.is_initialized():
            ray.shutdown()

    def _update(self, address: str, held: dict[str, _Held]) -> bool:
        ray = import_ray()
        try:
            for run_id, item in held.items():
                if item.group is None and item.reservation.address == address:
                    item.group = create_group(item.reservation.plan, group_name(run_id))
                    item.ready = item.group.ready()
            refs = [h.ready for h in held.values() if h.ready is not None]
            placed = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
            free = cluster_free() if len(placed) < len(refs) else {}
        except BaseException:
            self._store(held, lambda r, h: r)  # groups made for runs released meanwhile go
            raise
        return self._store(held, lambda r, h: _next(r, h, address, placed, free))

    def _store(
        self, items: dict[str, _Held], update: Callable[[Reservation, _Held], Reservation]
    ) -> bool:
        """Write back what a refresh found, for the runs still wanted; a group made for a
        run released meanwhile is removed at the next refresh."""
        changed = False
        with self._lock:
            for run_id, item in items.items():
                if self._held.get(run_id) is not item:
                    if item.group is not None:
                        self._doomed.append(item.group)
                    continue
                before = item.reservation
                item.reservation = update(before, item)
                changed = changed or item.reservation.state != before.state
        return changed


def _next(
    reservation: Reservation, item: _Held, address: str, placed: set[Any], free: dict[str, float]
) -> Reservation:
    if reservation.address != address:
        waiting = (
            f"ray: the backend is connected to {address}; it connects to "
            f"{reservation.address} when nothing is reserved there"
        )
        return replace(reservation, waiting=waiting)
    group_id = str(item.group.id.hex())
    if item.ready in placed:
        return replace(reservation, state="ready", group_id=group_id, waiting="")
    waiting = describe_wait(reservation.plan.demand(), free)
    return replace(reservation, state="pending", group_id=group_id, waiting=waiting)


def _connecting(address: str) -> str:
    return f"ray: connecting to {address} to reserve the run's placement group"
