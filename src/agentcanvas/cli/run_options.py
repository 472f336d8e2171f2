"""The run options of ``eval``, ``verify-invariance`` and ``demo``, and the EvalConfig
they build."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from agentcanvas.errors import ConfigError
from agentcanvas.eval.config import EvalConfig

__all__ = ["FRAMES_HELP", "add_eval_arguments", "build_config", "parse_max_errors"]

FRAMES_HELP = "which episodes keep frames (default: every with --save-frames, else none)"


def parse_max_errors(text: str | None) -> int | float | None:
    """``--max-errors``: a whole number is a count, a decimal a fraction."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError as exc:
        raise ConfigError(
            f"--max-errors: expected a count (e.g. 3) or a fraction (e.g. 0.2), got {text!r}"
        ) from exc


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph name or path to a graph .json")
    p.add_argument("-n", "--episodes", type=int, default=10, help="episodes per task (default 10)")
    p.add_argument("--tasks", help="comma-separated task ids (default: the graph's tasks)")
    p.add_argument("--start-index", type=int, default=0, help="first episode_index of each task")
    p.add_argument("--step-budget", type=int, help="override the step budget (>= 1)")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument(
        "--per-step-timeout",
        type=float,
        default=10.0,
        help="deadline of each node call, seconds (a wall-clock safety net)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        help="wall-clock limit per episode, seconds (default: step budget × per-step timeout)",
    )
    p.add_argument(
        "--max-errors",
        metavar="N|FRACTION",
        help="stop the run (status failed, exit 2) once more than N episodes, or more than "
        "this fraction (0 < f < 1) of the run's episodes, end in error, exception, timeout "
        "or no_verdict (default: never stop; the health verdict reports them)",
    )
    p.add_argument("--save-frames", action="store_true", help="save frames (= --frames every)")
    p.add_argument("--frames", choices=["every", "failures", "none"], help=FRAMES_HELP)
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: node-set servers on this host (default); ray: episodes in Ray actors",
    )
    p.add_argument(
        "--ray-address",
        help="engine ray: auto, host:port or ray://host:10001 (default: start a local Ray)",
    )
    p.add_argument(
        "--certify",
        action="store_true",
        help="audit every batched row of the run, each recomputed alone (determinism level "
        "certified; a second forward pass per batched row): for numbers that go in a paper",
    )
    p.add_argument(
        "--until-halfwidth",
        type=float,
        metavar="H",
        help="stop rule: end once the success rate's anytime-valid confidence sequence "
        "(overall, all tasks pooled) is at most ±H wide; -n stays the cap",
    )
    p.add_argument(
        "--until-decided-vs",
        metavar="RUN",
        help="stop rule: end once an anytime-valid paired test (McNemar on the discordant "
        "pairs) says this run is better or worse than run RUN on the same episodes; at the "
        "cap: not distinguishable",
    )
    p.add_argument(
        "--stop-alpha",
        type=float,
        default=0.05,
        help="error rate of the stop rules (default 0.05)",
    )
    p.add_argument(
        "--binary-interval",
        choices=("wilson", "clopper-pearson"),
        default="wilson",
        help="interval of 0/1 metrics such as success: wilson (default) or clopper-pearson "
        "(exact, never below 95 %%, wider)",
    )


def build_config(args: argparse.Namespace, graph_name: str, workers: int) -> EvalConfig:
    """EvalConfig from CLI flags; a bad value names the flag's field."""
    try:
        return EvalConfig(
            graph_name=graph_name,
            episode_count=args.episodes,
            worker_count=workers,
            tasks=[t.strip() for t in args.tasks.split(",")] if args.tasks else None,
            start_index=args.start_index,
            step_budget=args.step_budget,
            seed=args.seed,
            per_step_timeout_s=args.per_step_timeout,
            episode_timeout_s=args.episode_timeout,
            max_errors=parse_max_errors(args.max_errors),
            save_frames=args.save_frames,
            frames=args.frames,
            engine=args.engine,
            ray_address=args.ray_address,
            certify=args.certify,
            binary_interval=args.binary_interval,
            until_halfwidth=args.until_halfwidth,
            until_decided_vs=args.until_decided_vs,
            stop_alpha=args.stop_alpha,
        )
    except ValidationError as exc:
        item = exc.errors()[0]
        raise ConfigError(f"field '{'.'.join(map(str, item['loc']))}': {item['msg']}") from exc
