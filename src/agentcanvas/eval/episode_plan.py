"""A run's plan: which episodes it runs, in which order, with which seeds.

Run index ``i`` ↦ ``(task, episode_index)``: ``episode_count`` episodes per task, indexed
from ``start_index`` (task-major order), or exactly the config's ``episodes`` in their order
(a retry, see ``eval.retry``). Seeds derive from the run seed and that identity
(``eval.seeding``), never from a worker or from the run index, so an episode planned in
another run with the same seed gets the same seed.
"""

from __future__ import annotations

from agentcanvas.eval import metrics
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.episode import EpisodeSpec
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["episode_tasks", "metric_rules", "plan_episodes", "planned_by_task", "planned_total"]


def episode_tasks(config: EvalConfig, graph: Graph) -> list[str]:
    """Tasks of the run, each once in plan order: those of the config's ``episodes``, else
    the config's ``tasks``, else the graph's env tasks, else its panel task."""
    if config.episodes is not None:
        return list(dict.fromkeys(ref.task for ref in config.episodes))
    return list(config.tasks) if config.tasks else graph.default_tasks()


def plan_episodes(config: EvalConfig, graph: Graph, run_key: str) -> list[EpisodeSpec]:
    """Every episode of the run by index, each with its seed and its key (``run_key:i``)."""
    if config.episodes is not None:
        identities = [(ref.task, ref.episode_index) for ref in config.episodes]
    else:
        n = config.episode_count
        identities = [
            (task, config.start_index + offset)
            for task in episode_tasks(config, graph)
            for offset in range(n)
        ]
    return [
        EpisodeSpec(
            index, task, ep_index, episode_seed(config.seed, task, ep_index), f"{run_key}:{index}"
        )
        for index, (task, ep_index) in enumerate(identities)
    ]


def planned_by_task(config: EvalConfig, graph: Graph) -> dict[str, int]:
    """How many episodes the run plans for each task (plan order)."""
    if config.episodes is None:
        return {task: config.episode_count for task in episode_tasks(config, graph)}
    counts: dict[str, int] = {}
    for ref in config.episodes:
        counts[ref.task] = counts.get(ref.task, 0) + 1
    return counts


def planned_total(config: EvalConfig, graph: Graph) -> int:
    """How many episodes the run plans (its ``episodes_total``)."""
    return sum(planned_by_task(config, graph).values())


def metric_rules(
    registry: WorkspaceComponentRegistry, graph: Graph, config: EvalConfig
) -> metrics.MetricRules:
    """The run's aggregation rules: the metric kinds its node sets and graph declare, the
    binary interval asked for, and the episodes planned per task."""
    manifests = [registry.manifest(name) for name in graph.nodesets()]
    return metrics.MetricRules(
        kinds=metrics.declared_kinds(manifests, graph.metrics),
        binary_interval=config.binary_interval,
        planned_by_task=planned_by_task(config, graph),
    )
