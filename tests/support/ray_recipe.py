"""The one-host Ray cluster of ``docs/cluster.md``, started with the page's own commands.

The commands are the page's ``<!-- recipe: NAME -->`` blocks, extracted from it (so the page
cannot drift from what is tested), with every port moved by one offset to free ones and the
``--temp-dir`` folders moved under the test's folder; they run in ``bash`` with a home folder
of the test's own (the token lands there, not in the user's ``~/.ray``). Each node's
``ray start --block`` leads a session of its own; stopping a node is what the page says
(Ctrl-C: SIGINT to its terminal's process group). Every process the recipe started — found by
its session, its ``--temp-dir`` or as a child of those — is killed by id at the end, also when
the test failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
BLOCK = re.compile(r"<!-- recipe: (?P<name>[a-z]+) -->\n```bash\n(?P<body>.*?)\n```", re.S)
NAMES = {"auth", "head", "node", "status", "eval"}
DOC_PORTS = re.compile(r"\b(6[3-6]\d\d|10001|44217|44227)\b")
TEMP_DIRS = re.compile(r"/tmp/(ray-[a-z0-9]+)")
METRIC_PORTS = {"AUTOSCALER_METRIC_PORT": 44217, "DASHBOARD_METRIC_PORT": 44227}
PORT_ROW = re.compile(r"^\| (?P<ports>[^|]+) \| [^|]+ \| (?P<bound>[^|]+) \|", re.M)


def recipe_blocks() -> dict[str, str]:
    """The page's recipe blocks by name (their text as printed)."""
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(DOC.read_text("utf-8"))}
    assert set(blocks) == NAMES, sorted(blocks)
    return blocks


def exported(block: str) -> dict[str, str]:
    """The variables a block's ``export A=1 B=2`` lines set."""
    found: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            found |= dict(item.split("=", 1) for item in line.split()[1:])
    return found


def all_interface_ports() -> set[int]:
    """The ports the page's listening table says are bound to all interfaces."""
    ports: set[int] = set()
    for row in PORT_ROW.finditer(DOC.read_text("utf-8")):
        if "all interfaces" not in row["bound"]:
            continue
        for low, high in re.findall(r"(\d+)(?:–(\d+))?", row["ports"]):
            ports |= set(range(int(low), int(high or low) + 1))
    return ports


def free_offset(ports: set[int]) -> int:
    """An offset that moves every one of ``ports`` to a port free on 127.0.0.1/0.0.0.0."""
    for offset in range(1000, 20000, 700):
        if all(_free(p + offset) for p in ports):
            return offset
    raise AssertionError("no free port range for the recipe cluster")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@dataclass
class RecipeCluster:
    """The page's head and node, started and stopped as the page says."""

    root: Path
    offset: int
    env: dict[str, str]
    blocks: dict[str, str] = field(default_factory=recipe_blocks)
    nodes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path) -> RecipeCluster:
        ports = {int(p) for p in DOC_PORTS.findall(DOC.read_text("utf-8"))}
        offset = free_offset(ports | all_interface_ports())
        home = root / "home"
        home.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env |= {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
        env |= {name: str(port + offset) for name, port in METRIC_PORTS.items()}
        return cls(root, offset, env)

    def text(self, name: str) -> str:
        """Block ``name`` with its ports moved and its temp dirs under ``root``."""
        moved = DOC_PORTS.sub(lambda m: str(int(m[0]) + self.offset), self.blocks[name])
        return TEMP_DIRS.sub(lambda m: str(self.root / m[1]), moved)

    def port(self, doc_port: int) -> int:
        return doc_port + self.offset

    def shell_env(self, auth: bool = True) -> dict[str, str]:
        """The environment after the auth block's exports (without them: ``auth=False``)."""
        return self.env | (exported(self.blocks["auth"]) if auth else {})

    def run(
        self, name: str, cwd: Path, timeout_s: float, auth: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Block ``name`` in bash, to completion."""
        return subprocess.run(
            ["bash", "-euc", self.text(name)],
            cwd=cwd,
            env=self.shell_env(auth) | {"AGENTCANVAS_HOME": str(cwd)},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """Block ``name`` (a ``ray start --block``) in a terminal of its own."""
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            ["bash", "-euc", self.text(name)],
            cwd=self.root,
            env=self.shell_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.nodes[name] = proc
        return proc

    def ctrl_c(self, name: str, deadline_s: float = 90.0) -> int:
        """Ctrl-C in the node's terminal (SIGINT to its process group, as a terminal sends
        it); its ``ray start`` exit code once it has stopped."""
        proc = self.nodes.pop(name)
        with contextlib.suppress(ProcessLookupError):  # it ended (its raylet was killed)
            os.killpg(proc.pid, signal.SIGINT)
        return proc.wait(deadline_s)

    def processes(self) -> dict[int, str]:
        """pid → command line of every live process the recipe started."""
        table = _process_table()
        mine = {pid for pid, (_, _, cmd) in table.items() if str(self.root) in cmd}
        mine |= {pid for pid, (_, sid, _) in table.items() if sid in self._sessions()}
        grown = True
        while grown:  # and their children (workers of a raylet, a driver's)
            more = {pid for pid, (ppid, _, _) in table.items() if ppid in mine} - mine
            mine |= more
            grown = bool(more)
        return {pid: table[pid][2] for pid in sorted(mine) if pid != os.getpid()}

    def _sessions(self) -> set[int]:
        return {proc.pid for proc in self.nodes.values()}

    def raylet_of(self, temp_dir: str) -> int:
        """The pid of the raylet whose node runs in ``--temp-dir`` ``/tmp/<temp_dir>``."""
        folder = str(self.root / temp_dir)
        (pid,) = [
            p for p, cmd in self.processes().items() if "raylet/raylet" in cmd and folder in cmd
        ]
        return pid

    def close(self) -> list[str]:
        """Ctrl-C every node still up, then SIGKILL (by pid) whatever is left; what had to
        be killed."""
        for name in list(self.nodes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.ctrl_c(name, 60.0)
        left = self.processes()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 30.0
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        return list(left.values())


def _process_table() -> dict[int, tuple[int, int, str]]:
    """pid → (parent pid, session id, command line) of every process."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[3]), cmd)
    return table


def sockets(pids: set[int], state: str) -> list[tuple[str, str, int]]:
    """(local address, peer address, pid) of the TCP sockets of ``pids`` in ``state``
    (``listening`` or ``established``), as ``ss`` reports them."""
    out = subprocess.run(
        ["ss", "-tnpH", "state", state], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((parts[2], parts[3], pid))
    return found


def host_of(address: str) -> str:
    """``127.0.0.1`` of ``[::ffff:127.0.0.1]:6379`` / ``127.0.0.1:6379``; ``*`` stays."""
    host = address.rsplit(":", 1)[0].strip("[]")
    return host.removeprefix("::ffff:")
