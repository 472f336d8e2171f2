"""Fixed cost per episode, no simulated latency: ours next to Gymnasium ``AsyncVectorEnv``.

    .venv/bin/python bench/episode_cost.py [--quick] [--episodes N] [--rounds R]
                                           [--no-record-log]

The same episodes on both sides (the BabyAI levels of ``babyai_oracle``, the batch eval's
episode seeds, the same BFS policy, no step latency), one worker each, as in
``bench/scaling.py`` (whose graph, vector env and policy this bench reuses):

- ours: ``run_foreground`` of ``babyai_oracle`` at W = 1: a tagged ``env_minigrid`` server,
  the panel round trip, per-step calls, evictions, the firing log, episode.json, the index
  and the live summary of every episode;
- ``AsyncVectorEnv``: one subprocess env, the policy in the main process, each slot taking
  the next pending episode on (same-step) autoreset.

Wall time of the episodes only (start-up apart), divided by the episode count. The two
sides run in interleaved rounds, the order alternating from round to round (whichever side
runs second runs on a warmer machine: measured, about 8 % on its own), so that a change of
load hits both alike; the table shows each round and the medians, with the ratio
(goal: ours <= 1.3x AsyncVectorEnv), its quartiles, and a 90 % bootstrap interval of the
median ratio: on a shared, noisy machine one round's ratio ranges widely, the median of many
paired rounds does not. ``--no-record-log``: ours without the firing log (what
``agentcanvas eval --no-record-log`` leaves out: the summaries of each firing's values and
each episode's ``log.jsonl``), to see what the log costs (docs/cluster.md, "Head cost").
To compare with another checkout, run this file with that checkout's ``src`` first on
``PYTHONPATH`` (the bench itself imports only ``bench/scaling.py`` and the package).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaling  # the bench folder is not a package
from agentcanvas.graph import summarize

GRAPH_NAME = "bench_episode_cost"


def one_round(
    workspace: Path, n_per_task: int, ave_first: bool, record_log: bool = True
) -> tuple[float, float, bool]:
    """(ours, AsyncVectorEnv) wall seconds for the same episodes, and whether they agree."""
    if ave_first:
        ave = scaling.run_ave(scaling.plan(n_per_task), 1, 0.0)
    run = scaling.run_ours(workspace, GRAPH_NAME, n_per_task, 1, record_log=record_log)
    ours = asyncio.run(run)
    if not ave_first:
        ave = scaling.run_ave(scaling.plan(n_per_task), 1, 0.0)
    return ours.wall_s, ave.wall_s, ours.steps == ave.steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 episodes, 4 rounds")
    parser.add_argument("--episodes", type=int, help="episodes per round (default 200)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 12)")
    parser.add_argument(
        "--no-record-log",
        dest="record_log",
        action="store_false",
        help="ours without the firing log (`agentcanvas eval --no-record-log`): what it costs",
    )
    args = parser.parse_args()
    n_total = args.episodes or (60 if args.quick else 200)
    rounds = args.rounds or (4 if args.quick else 12)
    n_per_task = max(1, n_total // len(scaling.TASKS))
    n_episodes = n_per_task * len(scaling.TASKS)
    warnings.filterwarnings("ignore")
    rows: list[tuple[float, float, bool]] = []
    with tempfile.TemporaryDirectory(prefix="bench_episode_cost_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        scaling.write_graph(workspace, GRAPH_NAME, 0.0)
        for k in range(rounds):
            rows.append(one_round(workspace, n_per_task, k % 2 == 1, args.record_log))
    _print(rows, n_episodes, args.record_log)
    return 0


def _print(rows: list[tuple[float, float, bool]], n_episodes: int, record_log: bool) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    walk = getattr(summarize, "IMPLEMENTATION", "python")  # (a checkout from before the copy)
    print(
        f"{n_episodes} episodes of {', '.join(scaling.TASKS)} per round, W = 1, no latency"
        f"{'' if record_log else ', ours without the firing log (--no-record-log)'}; "
        f"the log's summaries by the {walk} walk (scripts/build_native.py); "
        f"load average (1 min) at the end {load:.2f}; package from "
        f"{Path(scaling.__file__).parent.parent / 'src'} unless PYTHONPATH says otherwise"
    )
    head = f"{'round':>5} | {'ours ms/ep':>10} | {'AVE ms/ep':>9} | {'ours/AVE':>8} | same steps"
    print(head)
    print("-" * len(head))
    for k, (ours, ave, same) in enumerate(rows, 1):
        print(
            f"{k:>5} | {1000 * ours / n_episodes:>10.2f} | {1000 * ave / n_episodes:>9.2f} | "
            f"{ours / ave:>8.2f} | {same}"
        )
    ours_ms = statistics.median(1000 * r[0] / n_episodes for r in rows)
    ave_ms = statistics.median(1000 * r[1] / n_episodes for r in rows)
    ratios = [r[0] / r[1] for r in rows]
    ratio = statistics.median(ratios)
    low, high = scaling.median_interval(ratios)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio, ratio, ratio]
    print(
        f"median: ours {ours_ms:.2f} ms/episode, AsyncVectorEnv {ave_ms:.2f} ms/episode; "
        f"median of the per-round ratios {ratio:.2f}x (goal <= 1.3x); quartiles "
        f"{quartiles[0]:.2f}-{quartiles[2]:.2f}; 90 % interval of the median {low:.2f}-{high:.2f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
