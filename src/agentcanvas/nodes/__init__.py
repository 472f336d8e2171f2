"""The node API: everything a node-set author imports, from this package only.

::

    from agentcanvas.nodes import CallContext, NodeSet, PortSpec

    NODESET = NodeSet(name="my_nodes", version="0.1.0", parallelism="local")

    @NODESET.node("double", inputs=[PortSpec(name="x")], outputs=[PortSpec(name="y")])
    def double(inputs, config, state, ctx: CallContext):
        return {"y": 2 * inputs["x"]}

See docs/nodesets.md. The modules behind these names (``nodes.base``, ``nodes.manifest``, …)
are internal; tests/nodes/test_public_api.py keeps the built-in node sets and the docs'
examples on this list.
"""

from agentcanvas.errors import NodeSetError, UserInputError
from agentcanvas.frame_caption import MIN_FRAME_PX, caption_lines, captioned, upscaled
from agentcanvas.nodes.assets import save_frame
from agentcanvas.nodes.base import LocalNodeSet, NodeSet, Panel
from agentcanvas.nodes.definitions import BatchItem, CallContext
from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, MetricSpec, PanelSpec, PortSpec
from agentcanvas.nodes.panels import TaskPanel, Tasks, find_task, task_fields

__all__ = [  # noqa: RUF022 - plain sorted order, as tests/nodes/test_public_api.py checks
    "BatchItem",
    "CallContext",
    "FieldSpec",
    "LoadInfo",
    "LocalNodeSet",
    "MIN_FRAME_PX",
    "MetricSpec",
    "NodeSet",
    "NodeSetError",
    "Panel",
    "PanelSpec",
    "PortSpec",
    "TaskPanel",
    "Tasks",
    "UserInputError",
    "caption_lines",
    "captioned",
    "find_task",
    "save_frame",
    "task_fields",
    "upscaled",
]
