"""The Ray engine: whole episodes run inside Ray actors, the eval process writes the run.

``engine.RayEngine`` opens a Ray session (``session``), starts one actor per shared node set
(``model_actor``) and one per worker (``worker_actor``), and gives the run a
``BatchEvalRunner`` with ``runner.RayEpisodeWorkers``, which take episode indices from the
same work-stealing dispatcher as the local engine's workers and hand what the actors send
back to the run's recorder. Ray is an optional
dependency (``agentcanvas[ray]``): nothing here is imported unless a run asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentcanvas.eval.config import EvalConfig
    from agentcanvas.eval.engine import Engine


def select_engine(config: EvalConfig) -> Engine:
    """The engine a run's config asks for (Ray is imported only for ``engine: ray``)."""
    if config.engine == "ray":
        from agentcanvas.cluster.engine import RayEngine

        return RayEngine()
    from agentcanvas.eval.engine import LocalEngine

    return LocalEngine()
