"""What the workspace holds: ``nodesets``, ``graphs``, ``schema``, ``validate`` and ``tasks``."""

from __future__ import annotations

import argparse
import sys

from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json, resolve_graph, workspace_registry
from agentcanvas.cli.options import add_json
from agentcanvas.errors import AgentCanvasError, GraphValidationError, UserInputError
from agentcanvas.eval.tasks import graph_task_problems, valid_tasks
from agentcanvas.graph.model import graph_json_schema, load_graph_file

__all__ = ["GRAPHS", "NODESETS", "SCHEMA", "TASKS", "VALIDATE"]


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


def cmd_schema(args: argparse.Namespace) -> int:
    print_json(graph_json_schema())
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)  # the node sets, ports, cycles, panel fields
    problems = graph_task_problems(registry, graph)  # its tasks, on the env's own panel
    if problems:
        raise GraphValidationError(
            f"graph '{graph.name}' is not runnable:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    print(f"{graph.name}: ok ({len(graph.nodes)} nodes, {len(graph.edges)} edges)")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    valid = valid_tasks(registry, graph)
    own = graph.default_tasks() if graph.env is not None else []
    if args.json:
        env = graph.env.nodeset if graph.env else None
        print_json({"graph": graph.name, "env": env, "tasks": own, "valid": valid})
        return 0
    print(tasks_listing(graph.name, graph.env.nodeset if graph.env else None, own, valid))
    return 0


def tasks_listing(name: str, env: str | None, own: list[str], valid: list[str] | None) -> str:
    """The valid tasks, one a line; ``*`` marks the graph's own (a run's default), ``!`` one
    of those the env does not have."""
    if env is None:
        return f"{name}: no env; a task id is only a label"
    if valid is None:
        return f"{name}: env {env} takes any task id (its graph's: {', '.join(own) or '-'})"
    lines = [f"{name}: env {env}, {len(valid)} valid task(s); * the graph's own (run by default)"]
    lines += [f"  {'*' if task in own else ' '} {task}" for task in valid]
    lines += [
        f"  ! {task}  (in env.tasks, but the env has no such task)"
        for task in own
        if task not in valid
    ]
    return "\n".join(lines)


def _graphs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        nargs="?",
        choices=["list", "show"],
        default="list",
        help="list (default) or show NAME",
    )
    p.add_argument("name", nargs="?", help="the graph to show")
    add_json(p, "the list")


def _tasks_arguments(p: argparse.ArgumentParser) -> None:
    _graph_argument(p)
    add_json(p, "the graph's own tasks and the valid ones (null: any task id)")


def _graph_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name or path to a graph .json")


NODESETS = Command(
    "nodesets",
    "list the discovered node sets and their node types",
    cmd_nodesets,
    lambda p: add_json(p, "the manifests and load errors"),
    examples=("nodesets", "nodesets --json"),
)
GRAPHS = Command(
    "graphs",
    "list graphs, or show one (graphs show NAME)",
    cmd_graphs,
    _graphs_arguments,
    examples=("graphs", "graphs show babyai_oracle > my_graph.json"),
)
SCHEMA = Command(
    "schema",
    "print the graph format's JSON Schema",
    cmd_schema,
    examples=("schema > graph.schema.json",),
)
TASKS = Command(
    "tasks",
    "list the tasks a graph's env accepts (what --tasks takes)",
    cmd_tasks,
    _tasks_arguments,
    examples=("tasks babyai_oracle", "tasks my_graph --json"),
)
VALIDATE = Command(
    "validate",
    "check a graph can run: schema, node sets, ports, wiring, env and tasks",
    cmd_validate,
    _graph_argument,
    examples=("validate babyai_oracle", "validate graphs/my_graph.json"),
)
