"""The text_encoder node set behind a real auto_host server: batch invariance end to end.

Naive batching changes the bits of an embedding (shown with the model directly); the
server's invariant mode does not, at every batch size 1..8 and every position, with batches
formed by K concurrent clients exactly as a run's workers form them. One server for the
module (its start-up invariance check is the slow part); the babyai_goto run comes last and
reuses it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import pytest_asyncio
import torch

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.models.text_encoder import TextEncoder
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodesets.text_encoder import MAX_SEQ_LEN
from agentcanvas.server.proxy import RemoteNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_BATCH = 8  # the server's default AGENTCANVAS_MAX_BATCH
CALL_DEADLINE_S = 60.0
MAX_ROUNDS = 12  # tries per batch size until one round is one forward pass of K
# BabyAI-like texts of different token lengths (not the server's own start-up probes).
TEXTS = [
    "go to the green key",
    "purple ball",
    "go to a grey door",
    "pick up the blue box and then go to the red ball next to it",
    "key",
    "go to the yellow ball on your left",
    "red box",
    "open the grey door",
]


def rotated(k: int, rotation: int) -> list[str]:
    return [TEXTS[(rotation + i) % len(TEXTS)] for i in range(k)]


def bits(vector: npt.NDArray[np.float32]) -> bytes:
    assert vector.dtype == np.float32
    return np.ascontiguousarray(vector).view(np.uint32).tobytes()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[WorkspaceComponentRegistry]:
    """A registry with babyai_goto's shared server (text_encoder) started and bound."""
    workspace = tmp_path_factory.mktemp("encoder_workspace")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTCANVAS_HOME", str(workspace))
        for name in (ACTIVE_WORKSPACE_ENV, "AGENTCANVAS_FLUSH_POLICY", "AGENTCANVAS_MAX_BATCH"):
            patch.delenv(name, raising=False)
        reg = WorkspaceComponentRegistry(workspace=workspace)
        reg.scan_all()
        try:
            urls = await reg.ensure_shared_nodesets_for_graph(reg.load_graph("babyai_goto"))
            assert list(urls) == ["text_encoder"]
            yield reg
        finally:
            await reg.shutdown_all()


@pytest.fixture(scope="module")
def handle(registry: WorkspaceComponentRegistry) -> RemoteNodeSet:
    bound = registry.bound("text_encoder")
    assert isinstance(bound, RemoteNodeSet)
    return bound


async def get(handle: RemoteNodeSet, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=handle.url, timeout=CALL_DEADLINE_S) as client:
        response = await client.get(path)
        response.raise_for_status()
        value: dict[str, Any] = response.json()
        return value


async def embed(handle: RemoteNodeSet, text: str, client: str) -> npt.NDArray[np.float32]:
    ctx = CallContext(node_id="embed", step=0, client=client)
    async with asyncio.timeout(CALL_DEADLINE_S):
        outputs = await handle.call("embed", {}, {"text": text}, ctx)
    assert "error" not in outputs, outputs
    vector: npt.NDArray[np.float32] = outputs["embedding"]
    return vector


async def forward_passes(handle: RemoteNodeSet) -> int:
    return int((await get(handle, "/stats"))["forward_passes"])


async def embedded_alone(handle: RemoteNodeSet) -> dict[str, bytes]:
    """Each text as the only request of its forward pass (one attached client, in turn)."""
    await handle.attach("alone")
    try:
        before = await forward_passes(handle)
        alone = {text: bits(await embed(handle, text, "alone")) for text in TEXTS}
        assert await forward_passes(handle) - before == len(TEXTS)  # a pass per text
    finally:
        await handle.detach("alone")
    return alone


async def one_round(
    handle: RemoteNodeSet, texts: list[str], clients: list[str]
) -> tuple[list[bytes], int]:
    """All clients embed at once; their outputs and how many forward passes they took."""
    before = await forward_passes(handle)
    vectors = await asyncio.gather(
        *(embed(handle, t, c) for t, c in zip(texts, clients, strict=True))
    )
    return [bits(v) for v in vectors], await forward_passes(handle) - before


async def test_the_server_embeds_bit_identically_at_every_batch_size_and_position(
    handle: RemoteNodeSet,
) -> None:
    alone = await embedded_alone(handle)
    assert len(set(alone.values())) == len(TEXTS)
    full_batch_rounds: dict[int, int] = {}
    for k in range(2, MAX_BATCH + 1):
        clients = [f"k{k}/w{i}" for i in range(k)]
        for client in clients:
            await handle.attach(client)
        try:
            for rotation in range(MAX_ROUNDS):
                texts = rotated(k, rotation)
                got, n_passes = await one_round(handle, texts, clients)
                for position, (text, vector) in enumerate(zip(texts, got, strict=True)):
                    assert vector == alone[text], (
                        f"{text!r} from client {position} of {k} ({n_passes} forward passes)"
                    )
                if n_passes == 1:  # the whole round was one batch of k, every slot checked
                    full_batch_rounds[k] = rotation
                    break
        finally:
            for client in clients:
                await handle.detach(client)
    assert sorted(full_batch_rounds) == list(range(2, MAX_BATCH + 1)), full_batch_rounds
    sizes = {int(n) for n in (await get(handle, "/stats"))["batch_sizes"]}
    assert sizes >= set(range(1, MAX_BATCH + 1))


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """The server's thread count (AGENTCANVAS_NUM_THREADS defaults to 1)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


async def test_naive_batching_changes_the_bits_and_the_servers_mode_does_not(
    handle: RemoteNodeSet, one_thread: None
) -> None:
    mode = (await handle.determinism())["embed"]
    assert mode in ("padded", "single")
    encoder = TextEncoder(device="cpu", max_seq_len=MAX_SEQ_LEN, max_batch=MAX_BATCH)
    alone = {m: {t: bits(encoder.encode([t], m)[0]) for t in TEXTS} for m in ("naive", mode)}
    changed: list[tuple[int, int]] = []
    for k in range(1, MAX_BATCH + 1):
        for rotation in (0, 3):  # two neighbourhoods per size; every position of each
            texts = rotated(k, rotation)
            naive, invariant = encoder.encode(texts, "naive"), encoder.encode(texts, mode)
            for position, text in enumerate(texts):
                if bits(naive[position]) != alone["naive"][text]:
                    changed.append((k, position))
                assert bits(invariant[position]) == alone[mode][text], (k, position, text)
    assert changed, "naive batching was bit-exact on every (batch size, position) here"


async def test_determinism_reports_the_mode(handle: RemoteNodeSet) -> None:
    modes = await get(handle, "/determinism")
    assert set(modes) == {"embed", "ground"}
    assert modes["embed"] == modes["ground"] in ("padded", "single")  # never "(check failed)"


async def test_a_babyai_goto_run_records_the_mode_in_its_summary(
    registry: WorkspaceComponentRegistry, handle: RemoteNodeSet
) -> None:
    modes = await handle.determinism()
    config = EvalConfig(
        graph_name="babyai_goto",
        episode_count=1,
        worker_count=2,
        step_budget=12,
        record_log=False,
        certify=True,  # every batched row recomputed alone: padded is bit-exact, certified
    )
    # reuses the bound text_encoder server; shuts every server down at the end
    run = await asyncio.wait_for(
        run_foreground(registry, registry.load_graph("babyai_goto"), config), 120.0
    )
    summary = json.loads(Path(run.run_dir.summary_path).read_text(encoding="utf-8"))
    assert summary["status"] == "completed", summary.get("error")
    assert summary["episodes_done"] == 3
    determinism = summary["determinism"]
    assert determinism["shared_server_modes"] == {
        f"text_encoder.{node}": mode for node, mode in modes.items()
    }
    assert determinism["level"] == "certified" and determinism["guaranteed"] is True
    assert determinism["certify"] is True
    for name, entry in determinism["batched_functions"].items():
        assert entry["level"] == "certified" and entry["certify"], name
        assert entry["batched_requests"] == 0 and entry["mismatch"] is None
