"""The ``agentcanvas`` command line. Bad input exits 1 with a message, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agentcanvas import envsettings, exit_codes
from agentcanvas.cli_common import (
    COMMANDS,
    command,
    print_json,
    resolve_graph,
    workspace_registry,
)
from agentcanvas.errors import AgentCanvasError, UserInputError
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.tasks import check_tasks
from agentcanvas.graph.model import graph_json_schema, load_graph_file


@command("nodesets")
def cmd_nodesets(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    manifests = [registry.manifest(n).model_dump(mode="json") for n in registry.nodeset_names()]
    if args.json:
        print_json({"nodesets": manifests, "load_errors": registry.load_errors})
        return 0
    for m in manifests:
        origin = registry.origin(m["name"])
        print(f"{m['name']} {m['version']} [{m['parallelism']}, {origin}] - {m['description']}")
        for node in m["nodes"]:
            ins = ", ".join(p["name"] for p in node["inputs"]) or (
                "*" if node["dynamic_inputs"] else ""
            )
            outs = ", ".join(p["name"] for p in node["outputs"])
            print(f"    {m['name']}.{node['name']}({ins}) -> ({outs})")
    for name, err in registry.load_errors.items():
        print(f"{name}: FAILED TO LOAD: {err}", file=sys.stderr)
    return 0


@command("graphs")
def cmd_graphs(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    if args.action == "show":
        if not args.name:
            raise UserInputError("graphs show: give a graph NAME (see `agentcanvas graphs`)")
        sys.stdout.write(resolve_graph(registry, args.name).to_json())
        return 0
    entries = registry.graph_entries()
    rows = []
    for item in entries:
        try:
            graph = load_graph_file(item.path)
            rows.append(
                {
                    "name": item.name,
                    "origin": item.origin,
                    "path": str(item.path),
                    "description": graph.description,
                    "nodesets": graph.nodesets(),
                }
            )
        except AgentCanvasError as exc:
            rows.append(
                {
                    "name": item.name,
                    "origin": item.origin,
                    "path": str(item.path),
                    "error": str(exc),
                }
            )
    if args.json:
        print_json({"graphs": rows})
    else:
        for row in rows:
            print(f"{row['name']} [{row['origin']}] - {row.get('description') or row.get('error')}")
    return 0


@command("schema")
def cmd_schema(args: argparse.Namespace) -> int:
    print_json(graph_json_schema())
    return 0


@command("validate")
def cmd_validate(args: argparse.Namespace) -> int:
    graph = resolve_graph(workspace_registry(), args.graph)
    print(f"{graph.name}: ok ({len(graph.nodes)} nodes, {len(graph.edges)} edges)")
    return 0


@command("play")
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


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 1 with a message, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise UserInputError(f"{self.prog}: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agentcanvas",
        description=__doc__,
        epilog=exit_codes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("nodesets", help="list discovered node sets and node types")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("graphs", help="list graphs, or `graphs show NAME`")
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    sub.add_parser("schema", help="print the graph format's JSON Schema")
    p = sub.add_parser("validate", help="schema + semantic checks of a graph (name or path)")
    p.add_argument("graph")
    p = sub.add_parser(
        "play",
        help="run one episode in-process, like canvas Play",
        epilog=exit_codes.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph")
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
    p.add_argument("--json", action="store_true", help="print the episode record as JSON")
    for extend in _EXTENSIONS:
        extend(sub)
    return parser


_EXTENSIONS: list[Callable[[Any], None]] = []


def _load_extensions() -> None:
    """Sub-command modules register themselves here (kept apart to keep modules small)."""
    if _EXTENSIONS:
        return
    from agentcanvas import cli_backend, cli_eval, cli_export, cli_servers

    _EXTENSIONS.extend(
        [cli_eval.extend_parser, cli_servers.extend_parser, cli_backend.extend_parser]
    )
    _EXTENSIONS.append(cli_export.extend_parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentcanvas`` console script."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _load_extensions()
    try:
        envsettings.check_all()  # a bad AGENTCANVAS_* setting: exit 1 naming it, up front
        args = _parser().parse_args(argv)
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except AgentCanvasError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_codes.RUN_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Later writes, including the flush
        # at exit, go to /dev/null instead of printing a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return exit_codes.BROKEN_PIPE


if __name__ == "__main__":  # `python -m agentcanvas.cli`
    raise SystemExit(main())
