"""core: the glue every graph needs (local, in-process).

graphIn (episode facts), graphOut (metric sinks), constant, arith, compare, select, counter,
stopWhen (ends the loop) and recordFrame (records an RGB frame in the episode's video).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentcanvas.nodes import CallContext, NodeSet, PortSpec, save_frame


class CoreState:
    """Keyed per-episode containers (evicted at each episode's end)."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, str], float] = {}


def _evict(state: CoreState, episode_key: str) -> None:
    for key in [k for k in state.counters if k[0] == episode_key]:
        del state.counters[key]


NODESET = NodeSet(
    name="core",
    version="0.1.0",
    parallelism="local",
    description="Glue nodes: graph inputs/outputs, constants, arithmetic, control.",
    state_factory=CoreState,
    evict=_evict,
)


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConstantConfig(_Cfg):
    value: Any = None


class ArithConfig(_Cfg):
    op: Literal["add", "sub", "mul", "div", "min", "max"] = "add"


class CompareConfig(_Cfg):
    op: Literal["lt", "le", "eq", "ne", "ge", "gt"] = "eq"


ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "min": min,
    "max": max,
}
COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "le": operator.le,
    "eq": operator.eq,
    "ne": operator.ne,
    "ge": operator.ge,
    "gt": operator.gt,
}
_float = PortSpec(name="out", type="float")


@NODESET.node(
    "graphIn",
    outputs=[
        PortSpec(name="task", type="str"),
        PortSpec(name="episode_key", type="str"),
        PortSpec(name="seed", type="int"),
        PortSpec(name="step", type="int"),
    ],
)
def graph_in(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """Facts about the current episode and step."""
    return {
        "task": ctx.task,
        "episode_key": ctx.episode_key,
        "seed": ctx.episode_seed,
        "step": ctx.step,
    }


@NODESET.node("graphOut", dynamic_inputs=True)
def graph_out(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """A sink: its inputs after the last iteration become the episode's metrics."""
    return {}


@NODESET.node("constant", outputs=[PortSpec(name="value")], config=ConstantConfig)
def constant(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """Emits config.value every iteration."""
    return {"value": config.get("value")}


@NODESET.node(
    "arith",
    inputs=[PortSpec(name="a", type="float"), PortSpec(name="b", type="float")],
    outputs=[_float],
    config=ArithConfig,
)
def arith(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """a (op) b for op in add, sub, mul, div, min, max."""
    return {"out": ARITH[ArithConfig.model_validate(config).op](inputs["a"], inputs["b"])}


@NODESET.node(
    "compare",
    inputs=[PortSpec(name="a"), PortSpec(name="b")],
    outputs=[PortSpec(name="out", type="bool")],
    config=CompareConfig,
)
def compare(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """a (op) b for op in lt, le, eq, ne, ge, gt."""
    return {"out": bool(COMPARE[CompareConfig.model_validate(config).op](inputs["a"], inputs["b"]))}


@NODESET.node(
    "select",
    inputs=[PortSpec(name="cond", type="bool"), PortSpec(name="a"), PortSpec(name="b")],
    outputs=[PortSpec(name="out")],
)
def select(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """a when cond is truthy, else b."""
    return {"out": inputs["a"] if inputs["cond"] else inputs["b"]}


@NODESET.node(
    "counter",
    inputs=[PortSpec(name="increment", type="float", required=False)],
    outputs=[PortSpec(name="count", type="float")],
)
def counter(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """Running sum of increment (default 1) over this episode's iterations."""
    key = (ctx.episode_key, ctx.node_id)
    state.counters[key] = state.counters.get(key, 0.0) + float(inputs.get("increment", 1.0))
    return {"count": state.counters[key]}


@NODESET.node(
    "stopWhen",
    inputs=[PortSpec(name="cond", type="bool")],
    outputs=[PortSpec(name="done", type="bool")],
    done_port="done",
)
def stop_when(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """Ends the episode loop after this iteration when cond is truthy."""
    return {"done": bool(inputs["cond"])}


@NODESET.node(
    "recordFrame",
    inputs=[PortSpec(name="frame", type="array")],
    outputs=[PortSpec(name="path", type="str")],
)
def record_frame(
    inputs: dict[str, Any], config: dict[str, Any], state: CoreState, ctx: CallContext
) -> dict[str, Any]:
    """Records an RGB frame as this step's frame of assets/{node}.mp4 of this episode."""
    return {"path": save_frame(inputs["frame"], ctx)}
