"""One exception tree for AgentCanvas.

::

    AgentCanvasError
    ├── UserInputError            bad input from a user: exit code 1 / HTTP 4xx, never a traceback
    │   ├── GraphFormatError      malformed JSON, schema violation (names the field)
    │   ├── GraphValidationError  unknown node set / type / port, cycle, budget < 1
    │   ├── NotFoundError         a named thing does not exist (HTTP 404)
    │   │   ├── UnknownGraphError     no graph of that name
    │   │   ├── UnknownNodeSetError   no node set of that name
    │   │   ├── RunNotFoundError      no run folder of that id
    │   │   ├── EpisodeNotFoundError  the run has no episode of that index (yet)
    │   │   └── AssetNotFoundError    the episode has no asset of that name
    │   ├── UnsafeNameError       a name that would become a path fails the pattern/containment
    │   ├── ConfigError           an eval config or spec field is invalid
    │   └── DamagedRunError       a run folder's file is unreadable, too large or off its
    │                             model (names the file and the field; HTTP 422)
    ├── NodeSetError              a node set failed to load or to start
    ├── ServerError               a node-set server is unreachable, hung or died
    │   ├── ServerDiedError       the server process is gone (supervision restarts it)
    │   ├── ServerTimeoutError    a call got no answer within its deadline (wall clock)
    │   ├── RemoteError           the server raised handling a request (its type and message)
    │   └── ProtocolError         a reply does not fit the protocol (names the route and field)
    │       └── ProtocolVersionError  the server speaks another major protocol version
    ├── WireError                 a payload could not be encoded/decoded
    ├── StateError                a lifecycle transition was asked in the wrong state
    │   ├── RunLockedError        another living process is writing that run folder
    │   └── FleetClosedError      a server asked of a fleet that is stopping or stopped
    └── RunError                  a run could not be set up or persisted

Foreign errors are translated at each boundary with ``raise ... from exc``. An episode's
failure is data on its record and never escapes a worker as an exception.
"""

from __future__ import annotations


class AgentCanvasError(Exception):
    """Base of every error raised by agentcanvas."""


class UserInputError(AgentCanvasError):
    """Input from a user is wrong; the message says which field and how to fix it."""


class GraphFormatError(UserInputError):
    """A graph file is not valid JSON or violates the schema."""


class GraphValidationError(UserInputError):
    """A graph is well-formed but names unknown things or is not runnable."""


class NotFoundError(UserInputError):
    """A thing named by the user (graph, node set, run, episode, asset) does not exist."""


class UnknownGraphError(NotFoundError):
    """No graph of that name in the workspace or the built-ins."""


class UnknownNodeSetError(NotFoundError):
    """No node set of that name."""


class RunNotFoundError(NotFoundError):
    """No run folder of that id."""


class EpisodeNotFoundError(NotFoundError):
    """The run has no episode of that index (or not yet)."""


class AssetNotFoundError(NotFoundError):
    """The episode has no asset of that name."""


class UnsafeNameError(UserInputError):
    """A name that would become a path is not allowed."""


class ConfigError(UserInputError):
    """An eval configuration or run spec is invalid."""


class DamagedRunError(UserInputError):
    """A file of a run folder (summary.json, episode.json, spec.json, ...) is not what its
    typed model says: garbage bytes, the wrong JSON type, a field of the wrong type, missing
    or too large to read. The message names the file and the field."""


class NodeSetError(AgentCanvasError):
    """A node set could not be loaded or started."""


class ServerError(AgentCanvasError):
    """A node-set server did not answer properly in time."""


class ServerDiedError(ServerError):
    """A node-set server process is gone."""


class ServerTimeoutError(ServerError):
    """A node-set server did not answer a call within its deadline."""


class RemoteError(ServerError):
    """A node-set server raised while handling a request; carries the exception's type and
    message as the server reported them (``exc_type``, ``exc_message``)."""

    def __init__(self, message: str, exc_type: str = "", exc_message: str = "") -> None:
        super().__init__(message)
        self.exc_type, self.exc_message = exc_type, exc_message


class ProtocolError(ServerError):
    """A node-set server's reply does not fit its route's reply type (``server.protocol``);
    the message names the server, the route and the field."""


class ProtocolVersionError(ProtocolError):
    """A node-set server advertises another major protocol version than this client's; the
    message names both versions and the server's URL."""


class WireError(AgentCanvasError):
    """A wire payload could not be encoded or decoded."""


class StateError(AgentCanvasError):
    """A lifecycle transition was requested from the wrong state."""


class RunLockedError(StateError):
    """A run folder's writer lock is held by another living process."""


class FleetClosedError(StateError):
    """A server was asked of a fleet whose ``stop_all`` has begun: nothing new starts."""


class RunError(AgentCanvasError):
    """A run could not be set up, persisted or resumed."""


class DiskFullError(RunError):
    """A write found its disk full (ENOSPC) or its quota spent (EDQUOT). The message names
    the file, the disk (the mount point holding it) and its free space; the backend answers
    507. A run that meets one ends ``aborted``: resumable once space is freed."""


def describe(exc: BaseException) -> str:
    """``Type: message`` for an episode record — the type once, also when the message
    already starts with it (an error relayed from a node-set server carries its type), and
    ``Type (raised without a message)`` when it has none."""
    name, text = type(exc).__name__, str(exc)
    if not text.strip():  # the record still says something: never a bare "Type: "
        return f"{name} (raised without a message)"
    return text if text.startswith(f"{name}: ") else f"{name}: {text}"
