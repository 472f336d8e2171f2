"""``agentcanvas play``: one episode in this process, like canvas Play."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from agentcanvas import exit_codes
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json, resolve_graph, workspace_registry
from agentcanvas.cli.options import add_json
from agentcanvas.cli.run_options import add_run_options, build_config
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.tasks import check_tasks

__all__ = ["PLAY"]


def cmd_play(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    check_tasks(registry, graph, [args.task] if args.task else None, field="--task")
    task = args.task or graph.default_tasks()[0]
    options, run_seed = _play_options(args, graph.name)
    seed = episode_seed(run_seed, task, args.episode)
    spec = EpisodeSpec(0, task, args.episode, seed, key=f"play:{task}:{args.episode}")
    env = registry.local_instance(graph.env.nodeset) if graph.env else None
    wiring = EpisodeWiring(resolver=registry, env=env)

    async def go() -> Any:
        try:
            return await run_episode(graph, spec, wiring, options)
        finally:
            await registry.close_locals()

    result = asyncio.run(go())
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        print(
            f"{graph.name} task={task} episode={args.episode} seed={seed}: {result.status}, "
            f"{result.steps} steps"
        )
        for key, value in result.metrics.items():
            print(f"  {key} = {value}")
        if result.error:
            print(f"  error: {result.error}")
    return exit_codes.OK if result.status == "completed" else exit_codes.EPISODE_ERRORS


PLAY_FIELDS = ("seed", "step_budget", "per_step_timeout_s", "episode_timeout_s")
"""The run options that mean something for one episode (the rest are the batch's)."""


def _play_options(args: argparse.Namespace, graph_name: str) -> tuple[EpisodeOptions, int]:
    """The episode's budget and wall-clock limits, as a batch run would set them, and the
    run seed (checked by the same EvalConfig, so a bad value reads as it does for eval)."""
    config = build_config(args, graph_name)
    options = EpisodeOptions(
        step_budget_override=config.step_budget,
        per_step_timeout_s=config.per_step_timeout_s,
        episode_timeout_s=config.episode_timeout_s,
    )
    return options, config.seed


def _play_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name or path to a graph .json")
    p.add_argument(
        "--episode",
        type=int,
        default=0,
        metavar="INDEX",
        help="the episode's episode_index within its task (default: 0)",
    )
    p.add_argument("--task", help="task id (default: the graph's first task; see `tasks GRAPH`)")
    add_json(p, "the episode record")
    add_run_options(p, only=PLAY_FIELDS)


PLAY = Command(
    "play",
    "run one episode in this process, like canvas Play",
    cmd_play,
    _play_arguments,
    examples=(
        "play babyai_oracle --episode 3",
        "play my_graph --task BabyAI-GoToLocal-v0 --seed 7 --json",
    ),
    exit_codes="play",
)
