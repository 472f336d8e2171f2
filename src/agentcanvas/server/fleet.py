"""ServerFleet: which node-set servers this process runs or borrows, and where they listen.

- shared servers: one per node set (key ``name``), started once and refcounted per run;
- replicated servers: N tagged servers ``name#0 … #N-1`` (one per worker);
- borrowed servers: somebody else's, reached by URL; their ``stop()`` only closes our
  connections, so a borrower never kills the owner's server.

The fleet launches through the :class:`~agentcanvas.server.launcher.ServerLauncher` it is
built with (local child processes today, another engine later): whoever builds the fleet
chooses where servers run. Nothing below this layer imports it (docs/architecture.md).

Its lifecycle (`FleetState`)::

    open --stop_all--> closing --(servers stopped, launches over, launcher closed)--> closed

Only an open fleet starts, restarts or borrows a server; after ``stop_all`` begins, a launch
still in flight that completes is stopped at once and its caller gets FleetClosedError, and
``stop_all`` returns only when no launch is left (each within its own deadline).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentcanvas.errors import FleetClosedError, NodeSetError, ServerError, StateError
from agentcanvas.nodes.manifest import NodeSetManifest
from agentcanvas.server import protocol
from agentcanvas.server.launcher import STOP_TIMEOUT_S, LaunchedServer, ServerLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest

__all__ = ["FleetState", "ServerFleet", "ServerRecord", "ServerStatus", "server_key"]

ManifestOf = Callable[[str], NodeSetManifest]
log = logging.getLogger("agentcanvas.server")


class FleetState(enum.Enum):
    """Lifecycle of a `ServerFleet`; `_TRANSITIONS` lists the allowed moves."""

    OPEN = "open"  # servers start, restart and are borrowed
    CLOSING = "closing"  # stop_all began: nothing new starts; a completed launch is stopped
    CLOSED = "closed"  # every server stopped, every launch over, the launcher closed


_TRANSITIONS: dict[FleetState, frozenset[FleetState]] = {
    FleetState.OPEN: frozenset({FleetState.CLOSING}),
    FleetState.CLOSING: frozenset({FleetState.CLOSED}),
    FleetState.CLOSED: frozenset(),
}


def server_key(nodeset: str, tag: int | None) -> str:
    """A server's key in the fleet: ``name`` (shared, borrowed) or ``name#tag`` (a worker's)."""
    return nodeset if tag is None else f"{nodeset}#{tag}"


@dataclass
class ServerRecord:
    """One known server: owned (we launched it) or borrowed (a no-op stop shim)."""

    nodeset: str
    tag: int | None
    url: str
    handle: RemoteNodeSet
    server: LaunchedServer | None
    refcount: int = 0
    restarts: int = 0

    @property
    def owned(self) -> bool:
        return self.server is not None

    def is_alive(self) -> bool:
        return self.server.is_alive() if self.server is not None else True

    async def stop(self, *, kill: bool = False) -> None:
        await self.handle.close()
        if self.server is not None:  # borrowed: the shim's stop is a no-op
            await self.server.stop(kill=kill)


@dataclass(frozen=True)
class ServerStatus:
    """What the API shows of one server."""

    url: str
    refcount: int
    owned: bool
    alive: bool


class ServerFleet:
    """Servers known to this process, keyed ``name`` (shared/borrowed) or ``name#k``."""

    def __init__(self, launcher: ServerLauncher, manifest_of: ManifestOf) -> None:
        self.launcher = launcher
        self._manifest_of = manifest_of
        self.records: dict[str, ServerRecord] = {}
        self._launching: dict[str, asyncio.Future[ServerRecord]] = {}
        self._state = FleetState.OPEN
        self._in_flight = 0  # launcher.launch calls not over yet (start and restart)
        self._no_launch = asyncio.Event()  # set while _in_flight == 0
        self._no_launch.set()
        self._closed = asyncio.Event()
        self._closing = asyncio.Event()  # set when stop_all begins: launches in flight end

    # -- lifecycle state -------------------------------------------------------------------
    @property
    def state(self) -> FleetState:
        return self._state

    def _move(self, new: FleetState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise StateError(f"server fleet: cannot go from {self._state.value} to {new.value}")
        self._state = new

    def _require_open(self, what: str) -> None:
        if self._state is not FleetState.OPEN:
            raise FleetClosedError(f"server fleet is {self._state.value}: {what} refused")

    async def _launch_server(self, key: str, nodeset: str, tag: int | None) -> LaunchedServer:
        """``launcher.launch``, counted in flight until it is over. When ``stop_all`` begins
        first, the launch is cancelled (which stops its child) rather than waited for: a
        closing process must not wait for a model to load only to stop it (FleetClosedError
        either way, also for a server that came up just as the fleet closed)."""
        self._require_open(f"starting {key}")
        self._in_flight += 1
        self._no_launch.clear()
        launch = asyncio.ensure_future(self.launcher.launch(nodeset, tag))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({launch, closing}, return_when=asyncio.FIRST_COMPLETED)
            if not launch.done():
                raise FleetClosedError(
                    f"server fleet is {self._state.value}: {key} was stopped while it started"
                )
            server = launch.result()
            if self._state is not FleetState.OPEN:
                await server.stop()
                raise FleetClosedError(
                    f"server fleet is {self._state.value}: {key} came up after stop_all "
                    "began and was stopped"
                )
            return server
        finally:
            closing.cancel()
            if not launch.done():
                launch.cancel()  # a launch cancelled stops the child it started
            await asyncio.gather(launch, closing, return_exceptions=True)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._no_launch.set()

    # -- queries ---------------------------------------------------------------------------
    def record(self, key: str) -> ServerRecord | None:
        return self.records.get(key)

    def url(self, key: str) -> str | None:
        record = self.records.get(key)
        return record.url if record is not None else None

    def alive(self, key: str) -> bool:
        record = self.records.get(key)
        return record is not None and record.is_alive()

    async def answers(self, key: str, timeout_s: float | None = None) -> bool:
        """Whether the server of ``key`` answers ``/health`` now (within ``timeout_s``)."""
        record = self.records.get(key)
        if record is None:
            return False
        try:
            if timeout_s is None:
                await record.handle.health()
            else:
                await record.handle.health(timeout_s)
        except ServerError:
            return False
        return True

    def status(self) -> dict[str, ServerStatus]:
        return {
            key: ServerStatus(r.url, r.refcount, r.owned, r.is_alive())
            for key, r in self.records.items()
        }

    # -- refcounts of shared servers -------------------------------------------------------
    async def acquire(self, nodeset: str) -> ServerRecord:
        """The shared server of ``nodeset``, started if needed, with one more holder."""
        record = await self.start(nodeset)
        record.refcount += 1
        return record

    def release(self, names: Sequence[str]) -> list[str]:
        """Refcount −1 for each; returns the names whose refcount reached zero."""
        idle = []
        for name in names:
            record = self.records.get(name)
            if record is not None:
                record.refcount = max(0, record.refcount - 1)
                if record.refcount == 0:
                    idle.append(name)
        return idle

    def refcount(self, name: str) -> int | None:
        """How many runs hold the server ``name``; None when it is not running."""
        record = self.records.get(name)
        return record.refcount if record is not None else None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, nodeset: str, tag: int | None = None) -> ServerRecord:
        """The server of ``key``, launched once: concurrent callers share one launch. An
        owned server found dead is launched again (its record, refcount included, kept)."""
        key = server_key(nodeset, tag)
        self._require_open(f"starting {key}")
        record = self.records.get(key)
        if record is not None and (record.is_alive() or not record.owned):
            return record
        pending = self._launching.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._launch(key, nodeset, tag))
            self._launching[key] = pending
            pending.add_done_callback(lambda _: self._launching.pop(key, None))
        return await asyncio.shield(pending)  # one caller cancelled: the launch goes on

    async def _launch(self, key: str, nodeset: str, tag: int | None) -> ServerRecord:
        if key in self.records:  # owned and dead
            return await self.restart(key)
        server = await self._launch_server(key, nodeset, tag)
        handle = self._handle(key, nodeset, server)
        record = ServerRecord(nodeset, tag, server.url, handle, server)
        self.records[key] = record
        return record

    def _handle(self, key: str, nodeset: str, server: LaunchedServer) -> RemoteNodeSet:
        """The proxy of an owned server; it knows the call socket from the server's ready
        report, so its first call needs no ``/health`` round trip (nor an HTTP client)."""
        return RemoteNodeSet(
            key, server.url, self._manifest_of(nodeset), call_endpoint=server.call_endpoint
        )

    async def start_many(self, wanted: Sequence[tuple[str, int | None]]) -> list[ServerRecord]:
        """Start several servers concurrently; on any failure stop the ones just started."""
        missing = [w for w in wanted if server_key(*w) not in self.records]
        results = await asyncio.gather(
            *(self.start(n, t) for n, t in missing), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for nodeset, tag in missing:
                record = self.records.pop(server_key(nodeset, tag), None)
                if record is not None:
                    await record.stop()
            raise failures[0]
        return [self.records[server_key(n, t)] for n, t in wanted]

    async def borrow(self, nodeset: str, url: str) -> ServerRecord:
        """Reach somebody else's server at ``url``: fetch its manifest (and from it the call
        endpoint: no ``/health`` round trip before the first call); never stop it."""
        self._require_open(f"borrowing {nodeset}")
        served = await fetch_manifest(url)
        if served.name != nodeset:
            raise NodeSetError(f"server at {url} serves {served.name!r}, not {nodeset!r}")
        handle = RemoteNodeSet(
            nodeset,
            url,
            served.declared(),
            call_endpoint=served.call_endpoint,
            attaches=protocol.attaches_memory(served.protocol_version),
        )
        if self._state is not FleetState.OPEN:  # stop_all began while we asked
            await handle.close()
            self._require_open(f"borrowing {nodeset}")
        record = ServerRecord(nodeset, None, url, handle, server=None)
        self.records[nodeset] = record
        return record

    async def restart(self, key: str, *, kill: bool = False) -> ServerRecord:
        """Stop (if needed; ``kill``: SIGKILL at once) and relaunch an owned server; the
        record keeps its key."""
        self._require_open(f"restarting {key}")
        old = self.records[key]
        if not old.owned:
            raise NodeSetError(f"{key} is borrowed; only its owner can restart it")
        await old.stop(kill=kill)
        server = await self._launch_server(key, old.nodeset, old.tag)
        old.server, old.url = server, server.url
        old.handle = self._handle(key, old.nodeset, server)
        old.restarts += 1
        return old

    async def stop(self, key: str) -> None:
        record = self.records.pop(key, None)
        if record is not None:
            await record.stop()

    async def stop_all(self) -> None:
        """Close the fleet: stop every server (borrowed ones: close our connections), end
        the launches still in flight (each stops what it launched), close the launcher.
        Once only; a second call waits for the first."""
        if self._state is not FleetState.OPEN:
            await self._closed.wait()  # the first stop_all's waits all have deadlines
            return
        self._move(FleetState.CLOSING)
        self._closing.set()
        try:
            records, self.records = list(self.records.values()), {}
            await asyncio.gather(*(r.stop() for r in records), return_exceptions=True)
            await self._launches_over()
            await self.launcher.close()  # e.g. the templates of forked servers
        finally:
            self._move(FleetState.CLOSED)
            self._closed.set()

    async def _launches_over(self) -> None:
        """Wait for the launches in flight to end (the closing event ends each, stopping its
        child within STOP_TIMEOUT_S); past that, cancel the fleet's own futures too."""
        wait_s = 2 * STOP_TIMEOUT_S
        try:
            async with asyncio.timeout(wait_s):
                await self._no_launch.wait()
        except TimeoutError:
            log.warning("server launches still in flight after %.0f s: cancelled", wait_s)
            launching = list(self._launching.values())
            for future in launching:
                future.cancel()
            await asyncio.gather(*launching, return_exceptions=True)
