"""``agentcanvas play``: one episode in this process, like canvas Play."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from agentcanvas import exit_codes
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json, resolve_graph, workspace_registry
from agentcanvas.cli.options import add_json
from agentcanvas.errors import UserInputError
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.tasks import check_tasks

__all__ = ["PLAY"]


def cmd_play(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    if args.task:
        check_tasks(registry, graph, [args.task], field="--task")
    task = args.task or graph.default_tasks()[0]
    seed = episode_seed(args.seed, task, args.episode)
    spec = EpisodeSpec(0, task, args.episode, seed, key=f"play:{task}:{args.episode}")
    env = registry.local_instance(graph.env.nodeset) if graph.env else None
    wiring = EpisodeWiring(resolver=registry, env=env)
    options = _play_options(args)

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


def _play_options(args: argparse.Namespace) -> EpisodeOptions:
    """The episode's budget and wall-clock limits, as a batch run would set them."""
    if args.step_budget is not None and args.step_budget < 1:
        raise UserInputError(f"--step-budget must be >= 1 (got {args.step_budget})")
    for flag, value in (
        ("--per-step-timeout", args.per_step_timeout),
        ("--episode-timeout", args.episode_timeout),
    ):
        if value is not None and not 0 < value < float("inf"):
            raise UserInputError(f"{flag} must be a number of seconds > 0 (got {value})")
    return EpisodeOptions(
        step_budget_override=args.step_budget,
        per_step_timeout_s=args.per_step_timeout,
        episode_timeout_s=args.episode_timeout,
    )


def _play_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name or path to a graph .json")
    p.add_argument("--episode", type=int, default=0, help="episode_index (default 0)")
    p.add_argument("--task", help="task id (default: the graph's first task)")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument("--step-budget", type=int, help="override the step budget (>= 1)")
    p.add_argument(
        "--per-step-timeout", type=float, default=10.0, help="deadline of each node call, s"
    )
    p.add_argument(
        "--episode-timeout", type=float, help="episode limit, s (default: budget × per-step)"
    )
    add_json(p, "the episode record")


PLAY = Command(
    "play",
    "run one episode in this process, like canvas Play",
    cmd_play,
    _play_arguments,
    exit_codes="play",
)
