"""Cold start and memory of N env servers: spawned interpreters next to pre-forked servers.

    .venv/bin/python bench/coldstart.py [--quick] [--nodeset NAME] [--repeats R]

For N = 1, 4, 8 tagged servers of one replicated node set (default ``env_minigrid``, the
BabyAI env of ``babyai_oracle``), measured in the same run:

- ``spawn``: every server a fresh ``python -m agentcanvas.server.auto_host`` (imports FastAPI,
  uvicorn, msgspec and the node sets, loads its node set);
- ``fork``: a template process per node set loads all that once and forks each server
  (`agentcanvas.server.forkserver`). Its cold start includes starting the template.

Each figure is the wall time of ``ServerFleet.start_many`` from nothing until every server
answers, the mean of ``--repeats`` (``--quick``: 1). Then, at N = 8 with both kinds
running, the proportional set size (PSS, psutil ``memory_full_info().pss``) of each server:
pages shared with the template (or another server) count only in part; and the template's
own PSS and RSS. A server imports its own node set only (`NodeSetCatalogue.load_one`), not
every node set of the workspace. Goals: fork cold start N = 8 <= 1.5 x N = 1, N = 1 no
slower than spawn, PSS per server <= 25 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import warnings

import psutil

from agentcanvas.server.fleet import ServerFleet
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.registry import WorkspaceComponentRegistry

COUNTS = (1, 4, 8)


def servers(registry: WorkspaceComponentRegistry, fork: bool) -> ServerFleet:
    forkable = registry.catalogue.is_forkable if fork else (lambda name: False)
    return ServerFleet(LocalProcessLauncher(forkable=forkable), registry.manifest)


async def cold_start(
    registry: WorkspaceComponentRegistry, nodeset: str, n: int, fork: bool
) -> float:
    pool = servers(registry, fork)
    started = time.perf_counter()
    try:
        records = await pool.start_many([(nodeset, k) for k in range(n)])
        await asyncio.gather(*(r.handle.health() for r in records))
        return time.perf_counter() - started
    finally:
        await pool.stop_all()


async def pss_mb(
    registry: WorkspaceComponentRegistry, nodeset: str, fork: bool
) -> tuple[list[float], list[tuple[float, float]]]:
    """The PSS of each of 8 servers, and the (PSS, RSS) of each fork template, in MB."""
    pool = servers(registry, fork)
    try:
        records = await pool.start_many([(nodeset, k) for k in range(8)])
        for record in records:  # every server has loaded its state and answered once
            await record.handle.health()
        pids = [r.server.pid for r in records if r.server is not None and r.server.pid]
        sizes = [psutil.Process(p).memory_full_info().pss / 2**20 for p in pids]
        templates = [
            (info.pss / 2**20, info.rss / 2**20)
            for child in psutil.Process().children()
            if "agentcanvas.server.forkserver" in child.cmdline()
            for info in [child.memory_full_info()]
        ]
        return sizes, templates
    finally:
        await pool.stop_all()


async def bench(nodeset: str, repeats: int) -> None:
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    table: dict[tuple[str, int], float] = {}
    for _ in range(repeats):  # interleaved: a change of load hits both kinds alike
        for n in COUNTS:
            for kind in ("spawn", "fork"):
                table.setdefault((kind, n), 0.0)
                table[(kind, n)] += await cold_start(registry, nodeset, n, kind == "fork")
    print(f"{'N':>3} {'spawn s':>9} {'fork s':>9} {'fork/spawn':>11}")
    for n in COUNTS:
        spawn, fork = table[("spawn", n)] / repeats, table[("fork", n)] / repeats
        print(f"{n:>3} {spawn:>9.2f} {fork:>9.2f} {fork / spawn:>10.2f}x")
    for kind in ("spawn", "fork"):
        ratio = table[(kind, 8)] / table[(kind, 1)]
        print(f"{kind}: N = 8 / N = 1 = {ratio:.2f}x (goal for fork <= 1.5x)")
    print("\nPSS per server at N = 8 (MB)")
    for kind in ("spawn", "fork"):
        sizes, templates = await pss_mb(registry, nodeset, kind == "fork")
        print(
            f"  {kind:<6} median {statistics.median(sizes):6.1f}   max {max(sizes):6.1f}"
            + ("   (goal <= 25)" if kind == "fork" else "")
        )
        for pss, rss in templates:
            print(f"  fork template: PSS {pss:6.1f}   RSS {rss:6.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--nodeset", default="env_minigrid")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    repeats = 1 if args.quick else args.repeats
    print(
        f"bench/coldstart.py: node set {args.nodeset}, {repeats} repeat(s); "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n"
    )
    asyncio.run(bench(args.nodeset, repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
