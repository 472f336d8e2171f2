"""``save_frame`` checks the node id that becomes part of an asset's file name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentcanvas.errors import UnsafeNameError
from agentcanvas.nodes.assets import save_frame
from agentcanvas.nodes.base import CallContext


@pytest.mark.parametrize("node_id", ["../evil", "x/../../evil", "..", "a/b"])
def test_save_frame_refuses_a_node_id_that_is_a_path(tmp_path: Path, node_id: str) -> None:
    assets = tmp_path / "run" / "episodes" / "ep0000" / "assets"
    (assets / "step0000_x").mkdir(parents=True)  # where "x/../../evil" would climb out from
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    ctx = CallContext(node_id=node_id, step=0, asset_dir=str(assets))

    with pytest.raises(UnsafeNameError, match="node_id"):
        save_frame(np.zeros((4, 4, 3), dtype=np.uint8), ctx)

    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_save_frame_writes_a_checked_name_inside_the_asset_dir(tmp_path: Path) -> None:
    ctx = CallContext(node_id="env", step=3, asset_dir=str(tmp_path / "assets"))
    name = save_frame(np.zeros((4, 4, 3), dtype=np.uint8), ctx)
    assert name == "step0003_env.png"
    assert [p.name for p in (tmp_path / "assets").iterdir()] == [name]
