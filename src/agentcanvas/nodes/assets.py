"""PNG frame assets of an episode (assets/step{step:04d}_{node}.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from agentcanvas.nodes.base import CallContext
from agentcanvas.paths import check_name, safe_child

__all__ = ["save_frame"]


def save_frame(frame: Any, ctx: CallContext) -> str:
    """Write ``frame`` (H×W×3 uint8) to the episode's assets folder; "" when none is set."""
    if not ctx.asset_dir:
        return ""
    array = np.asarray(frame)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.dtype != np.uint8:
        raise ValueError(
            f"frame must be an HxWx3 uint8 array, got {array.dtype}{list(array.shape)}"
        )
    folder = Path(ctx.asset_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = check_name("asset", f"step{ctx.step:04d}_{ctx.node_id}.png", field="node_id")
    path = safe_child(folder, "asset", name, field="node_id")
    Image.fromarray(array).save(path)
    return path.name
