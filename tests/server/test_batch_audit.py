"""The batch-invariance check and audit: bit comparison, the start-up sweep, the running audit.

The server tests drive a real BatchedInferenceServer with asyncio tasks: every attached
client submits at once, so the batch is due at once (no timing involved). The handlers are
real batch functions: one computes each row alone, one subtracts half the batch mean.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict

from agentcanvas.errors import NodeSetError, UserInputError
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSet
from agentcanvas.nodes.batch_check import check_examples, rotated_batches, same_bits
from agentcanvas.nodes.manifest import PortSpec
from agentcanvas.server.batch_audit import (
    AuditSettings,
    BatchAuditor,
    FunctionAudit,
    build_auditor,
    split_episode_key,
)
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.batching import FlushPolicy
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.workspace import write_files

DEADLINE_S = 10.0
W = np.linspace(-1.0, 1.0, 4)


def steady(items: list[Any], config: dict[str, Any]) -> list[float]:
    return [float(np.asarray(obs) @ W) for obs, _ in items]


def centred(items: list[Any], config: dict[str, Any]) -> list[float]:
    rows = np.stack([np.asarray(obs, dtype=np.float64) for obs, _ in items])
    mean = rows.mean(axis=0)
    return [float((row - 0.5 * mean) @ W) for row in rows]


# -- bit comparison -----------------------------------------------------------------------


def test_same_bits_compares_floats_by_their_bits_and_containers_deeply() -> None:
    assert same_bits(0.1 + 0.2, 0.30000000000000004)
    assert not same_bits(0.1 + 0.2, 0.3)
    assert not same_bits(0.0, -0.0)
    assert same_bits(math.nan, math.nan)
    assert not same_bits(1, 1.0) and not same_bits(np.float32(1.0), 1.0)
    a = np.array([1.0, 2.0], dtype=np.float32)
    assert same_bits({"x": [a, {"k": 3}]}, {"x": [a.copy(), {"k": 3}]})
    assert not same_bits(a, a.astype(np.float64))
    assert not same_bits(a, np.nextafter(a, np.float32(3.0)))
    assert not same_bits({"x": 1}, {"x": 1, "y": 2})


def test_rotations_put_every_example_at_every_position_of_every_size() -> None:
    batches = rotated_batches(3, 4)
    assert len(batches) == 3 * 4
    for size in range(1, 5):
        of_size = [b for b in batches if len(b) == size]
        assert {(pos, b[pos]) for b in of_size for pos in range(size)} == {
            (pos, ex) for pos in range(size) for ex in range(3)
        }


# -- the start-up sweep -------------------------------------------------------------------

EXAMPLES = [
    np.array(v, dtype=np.float32)
    for v in ([0.5, -1, 2, 0.25], [-1.5, 0.75, 0, 1], [3, 0.5, -0.5, -2])
]


def sweep(fn: Any, max_batch: int = 4) -> Any:
    return check_examples(lambda idx: fn([(EXAMPLES[i], None) for i in idx], {}), 3, max_batch)


def test_the_sweep_passes_a_batch_invariant_function() -> None:
    report = sweep(steady)
    assert report.ok and report.n_mismatched == 0
    assert report.n_checked == 3 * (1 + 2 + 3 + 4)  # every row of every rotated batch


def test_the_sweep_fails_a_batch_dependent_function_and_says_where() -> None:
    report = sweep(centred)
    assert not report.ok and report.n_mismatched > 0
    assert report.first_mismatch is not None
    assert report.first_mismatch.startswith("example 0 at position 0 of a batch of 2: output: ")


def test_the_sweep_fails_a_function_that_only_differs_in_the_last_bit_at_one_position() -> None:
    def last_row_nudged(items: list[Any], config: dict[str, Any]) -> list[float]:
        out = steady(items, config)
        if len(out) == 4:
            out[3] = float(np.nextafter(out[3], math.inf))
        return out

    report = sweep(last_row_nudged)
    assert not report.ok and report.n_mismatched == 3  # each example once at position 3
    assert "at position 3 of a batch of 4" in (report.first_mismatch or "")


def test_the_sweep_fails_a_function_whose_answer_alone_changes_between_calls() -> None:
    calls = iter(range(1_000))

    def counting(items: list[Any], config: dict[str, Any]) -> list[float]:
        n = next(calls)
        return [v + n for v in steady(items, config)]

    assert not sweep(counting).ok


# -- examples declared on a node set; the start-up check there ---------------------------


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scale: float = 1.0


def model_nodeset(examples: Sequence[dict[str, Any]] | None) -> NodeSet:
    nodeset = NodeSet(name="scorer", parallelism="shared")

    @nodeset.batched_node(
        "steady",
        inputs=[PortSpec(name="obs")],
        outputs=[PortSpec(name="value")],
        config=Strict,
        examples=examples,
    )
    def _steady(items: list[Any], config: dict[str, Any], state: Any) -> list[dict[str, Any]]:
        scale = Strict.model_validate(config).scale
        return [{"value": scale * v} for v in steady([(i["obs"], c) for i, c in items], config)]

    @nodeset.batched_node(
        "centred",
        inputs=[PortSpec(name="obs")],
        outputs=[PortSpec(name="value")],
        examples=examples,
    )
    def _centred(items: list[Any], config: dict[str, Any], state: Any) -> list[dict[str, Any]]:
        return [{"value": v} for v in centred([(i["obs"], c) for i, c in items], config)]

    return nodeset


def test_examples_are_checked_at_declaration_and_counted_in_the_manifest() -> None:
    manifest = model_nodeset([{"obs": e} for e in EXAMPLES]).manifest()
    assert manifest.node_type("steady").batch_examples == 3  # type: ignore[union-attr]
    assert model_nodeset(None).manifest().node_type("steady").batch_examples == 0  # type: ignore[union-attr]
    with pytest.raises(NodeSetError, match=r"examples\[1\] has no value for the required"):
        model_nodeset([{"obs": EXAMPLES[0]}, {"observation": EXAMPLES[1]}])
    with pytest.raises(NodeSetError, match="list of inputs dicts"):
        model_nodeset({"obs": EXAMPLES[0]})  # type: ignore[arg-type]


def test_the_start_up_check_verifies_one_function_and_sends_the_other_per_request() -> None:
    auditor = build_auditor(LocalNodeSet(model_nodeset([{"obs": e} for e in EXAMPLES])), 8)
    report = auditor.report()["functions"]
    assert report["steady"]["verified"] and report["steady"]["mode"] == "batched"
    assert report["steady"]["verified_by"].startswith("start-up check passed: 108 rows")
    assert not report["centred"]["verified"] and report["centred"]["mode"] == "per_request"
    assert report["centred"]["mismatch"]["found_by"] == "start-up check"
    unchecked = build_auditor(LocalNodeSet(model_nodeset(None)), 8).report()["functions"]
    assert unchecked["centred"]["mode"] == "batched" and not unchecked["centred"]["verified"]


# -- the running audit --------------------------------------------------------------------


def audited_server(
    clients: int, settings: AuditSettings, *audits: FunctionAudit
) -> BatchedInferenceServer:
    auditor = BatchAuditor(settings)
    for audit in audits:
        auditor.register(audit)
    server = BatchedInferenceServer(FlushPolicy(max_batch=8, cap_s=5.0), auditor=auditor)
    for k in range(clients):
        server.attach(f"run1/w{k}")
    return server


async def one_round(
    server: BatchedInferenceServer, fn: str, handler: Any, first_episode: int, k: int
) -> list[Any]:
    """Every attached client submits once (episodes first_episode..): one batch of k."""
    calls = [
        server.submit(
            fn,
            {},
            (EXAMPLES[(first_episode + i) % 3] * (1 + first_episode), None),
            f"run1/w{i}",
            handler,
            f"run1:{first_episode + i}",
        )
        for i in range(k)
    ]
    async with asyncio.timeout(DEADLINE_S):
        return list(await asyncio.gather(*calls))


async def test_the_first_mismatch_sends_the_function_per_request_and_names_its_request() -> None:
    server = audited_server(3, AuditSettings(rate=0.0 + 1 / 8), FunctionAudit("f", "batched", None))
    first = await one_round(server, "f", centred, 0, 3)  # batch 1 is always audited

    assert server.batch_size_counts == {3: 1} and server.audit_passes == 1
    assert first == centred([(EXAMPLES[i], None) for i in range(3)], {})  # served as batched
    assert server.auditor is not None
    f = server.auditor.report("run1")["functions"]["f"]
    assert f["mode"] == "per_request" and not f["verified"]
    assert f["mismatch"]["found_by"] == "audit"
    assert f["mismatch"]["detail"].startswith("position ")
    assert f["mismatch"]["episode_key"] in {"run1:0", "run1:1", "run1:2"}
    assert f["run"] == {
        "batched_requests": 3,
        "first_batched_episode": 0,
        "audited_batches": 1,
        "batches": 1,
        "rows_alone": 0,
        "certify": False,
    }

    second = await one_round(server, "f", centred, 3, 3)
    assert server.batch_size_counts == {3: 1, 1: 3}  # per request from now on
    assert second == [
        centred([(x, None)], {})[0] for x in (EXAMPLES[0] * 4, EXAMPLES[1] * 4, EXAMPLES[2] * 4)
    ]
    assert server.auditor.report("other")["functions"]["f"]["run"]["batched_requests"] == 0


async def test_the_audit_samples_a_seeded_share_of_batches_and_finds_nothing_wrong() -> None:
    server = audited_server(
        4, AuditSettings(rate=0.25, seed=3), FunctionAudit("f", "batched", None)
    )
    for r in range(9):
        await one_round(server, "f", steady, 4 * r, 4)

    assert server.batch_size_counts == {4: 9}
    assert server.audit_passes == 3  # batch 1, then one in four: batches 4 and 8
    assert server.auditor is not None
    f = server.auditor.report("run1")["functions"]["f"]
    assert f["mode"] == "batched" and f["mismatch"] is None and f["batches_audited"] == 3
    assert f["run"]["batched_requests"] == 36 and f["run"]["audited_batches"] == 3


async def test_audit_off_never_recomputes_and_so_never_notices() -> None:
    server = audited_server(3, AuditSettings(rate=0.0), FunctionAudit("f", "batched", None))
    await one_round(server, "f", centred, 0, 3)
    assert server.audit_passes == 0 and server.auditor is not None
    assert server.auditor.report("run1")["functions"]["f"]["mode"] == "batched"


def test_the_row_an_auditor_picks_depends_only_on_seed_function_and_batch_number() -> None:
    def picks(seed: int) -> list[int | None]:
        auditor = BatchAuditor(AuditSettings(rate=1.0, seed=seed))
        auditor.register(FunctionAudit("f", "batched", None))
        return [auditor.plan("f", [f"r:{i}" for i in range(8)]) for _ in range(20)]

    assert picks(1) == picks(1)
    assert picks(1) != picks(2)
    assert set(picks(1)) <= set(range(8))


def test_episode_keys_split_into_run_and_index() -> None:
    assert split_episode_key("20261201_040507:12") == ("20261201_040507", 12)
    assert split_episode_key("in-process:ep3") == ("in-process:ep3", None)
    assert split_episode_key("episode") == ("episode", None)


async def test_a_row_that_raises_alone_counts_as_a_mismatch() -> None:
    def fails_alone(items: list[Any], config: dict[str, Any]) -> list[float]:
        if len(items) == 1:
            raise ValueError("needs company")
        return steady(items, config)

    server = audited_server(2, AuditSettings(rate=1.0), FunctionAudit("f", "batched", None))
    await one_round(server, "f", fails_alone, 0, 2)
    assert server.auditor is not None
    f = server.auditor.report("run1")["functions"]["f"]
    assert f["mode"] == "per_request"
    assert "raised when run alone: ValueError: needs company" in f["mismatch"]["detail"]


def test_call_context_of_the_check_is_the_same_alone_and_batched() -> None:
    seen: list[CallContext] = []
    nodeset = NodeSet(name="ctxs", parallelism="shared")

    @nodeset.batched_node(
        "f",
        inputs=[PortSpec(name="x")],
        outputs=[PortSpec(name="y")],
        examples=[{"x": 1}, {"x": 2}],
    )
    def f(items: list[Any], config: dict[str, Any], state: Any) -> list[dict[str, Any]]:
        seen.extend(ctx for _, ctx in items)
        return [{"y": (inputs["x"], ctx.episode_seed, ctx.episode_key)} for inputs, ctx in items]

    report = build_auditor(LocalNodeSet(nodeset), 3).report()["functions"]["f"]
    assert report["verified"], report
    assert {c.episode_key for c in seen} == {"__batch_check__:0", "__batch_check__:1"}


# -- the batched example of docs/nodesets.md ----------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "nodesets.md"
DOC_EXAMPLE = re.compile(r"<!-- example: (?P<path>[^ ]+) -->\n```python\n(?P<body>.*?)\n```", re.S)


def test_the_docs_batched_example_passes_its_start_up_check_and_refuses_a_misspelt_key(
    tmp_path: Path,
) -> None:
    [found] = list(DOC_EXAMPLE.finditer(DOC.read_text("utf-8")))
    write_files(tmp_path, {found["path"]: found["body"] + "\n"})
    registry = WorkspaceComponentRegistry(workspace=tmp_path)
    registry.scan_all()
    assert registry.load_errors == {}
    nodeset = registry.nodeset("line_policy")
    spec = nodeset.manifest().node_type("toward")
    assert spec is not None and spec.batched and spec.batch_examples == 3

    report = build_auditor(LocalNodeSet(nodeset), 8).report()["functions"]["toward"]
    assert report["verified"] and report["mode"] == "batched", report
    assert report["verified_by"].startswith("start-up check passed: 108 rows")
    with pytest.raises(UserInputError, match="max_strid"):
        nodeset.validate_config("toward", {"max_strid": 2})


# -- --certify: every batched row of one run, served alone ------------------------------------
async def mixed_round(server: BatchedInferenceServer, handler: Any, round_: int) -> list[Any]:
    """Two requests of run1 (being certified) and two of run2 (sampled) in one batch."""
    keys = [
        f"run1:{2 * round_}",
        f"run1:{2 * round_ + 1}",
        f"run2:{2 * round_}",
        f"run2:{2 * round_ + 1}",
    ]
    calls = [
        server.submit("f", {}, (EXAMPLES[i % 3] * (1 + round_), None), f"c{i}", handler, key)
        for i, key in enumerate(keys)
    ]
    async with asyncio.timeout(DEADLINE_S):
        return list(await asyncio.gather(*calls))


def mixed_server(settings: AuditSettings, clients: int = 4) -> BatchedInferenceServer:
    auditor = BatchAuditor(settings)
    auditor.register(FunctionAudit("f", "batched", None))
    auditor.certify("run1")
    server = BatchedInferenceServer(FlushPolicy(max_batch=8, cap_s=5.0), auditor=auditor)
    for i in range(clients):
        server.attach(f"c{i}")
    return server


async def test_a_certified_run_gets_the_alone_results_and_the_others_the_batched_ones() -> None:
    server = mixed_server(AuditSettings(rate=0.0))  # the sampled audit off: only certify
    outputs = await mixed_round(server, centred, 0)

    batched = centred([(EXAMPLES[i % 3], None) for i in range(4)], {})
    alone = [centred([(EXAMPLES[i % 3], None)], {})[0] for i in range(4)]
    assert outputs[:2] == alone[:2] and outputs[2:] == batched[2:]
    assert server.audit_passes == 2  # run1's two rows, nothing of run2's
    assert server.auditor is not None
    run1 = server.auditor.report("run1")["functions"]["f"]
    assert run1["mode"] == "per_request" and run1["mismatch"]["found_by"] == "audit"
    assert run1["run"] == {
        "batched_requests": 0,
        "first_batched_episode": None,
        "audited_batches": 1,
        "batches": 1,
        "rows_alone": 2,
        "certify": True,
    }
    run2 = server.auditor.report("run2")["functions"]["f"]["run"]
    assert run2["batched_requests"] == 2 and run2["rows_alone"] == 0 and not run2["certify"]
    assert run2["first_batched_episode"] == 0


async def test_certify_ends_with_the_run_and_an_invariant_function_stays_batched() -> None:
    server = mixed_server(AuditSettings(rate=0.0))
    for r in range(3):
        assert await mixed_round(server, steady, r) == steady(
            [(EXAMPLES[i % 3] * (1 + r), None) for i in range(4)], {}
        )
    assert server.batch_size_counts == {4: 3} and server.audit_passes == 6
    assert server.auditor is not None
    f = server.auditor.report("run1")["functions"]["f"]
    assert f["mode"] == "batched" and f["mismatch"] is None
    assert f["run"]["rows_alone"] == 6 and f["run"]["batched_requests"] == 0
    server.auditor.certify("run1", on=False)
    await mixed_round(server, steady, 3)
    assert server.audit_passes == 6  # no longer certified: its rows are batched again
    assert server.auditor.report("run1")["functions"]["f"]["run"]["batched_requests"] == 2


async def test_a_held_row_that_raises_alone_gets_the_error() -> None:
    def fails_alone(items: list[Any], config: dict[str, Any]) -> list[float]:
        if len(items) == 1:
            raise ValueError("needs company")
        return steady(items, config)

    server = mixed_server(AuditSettings(rate=0.0), clients=2)
    calls = [
        server.submit("f", {}, (EXAMPLES[i], None), f"c{i}", fails_alone, key)
        for i, key in enumerate(["run1:0", "run2:0"])
    ]
    async with asyncio.timeout(DEADLINE_S):
        results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[0], ValueError) and results[1] == steady([(EXAMPLES[1], None)], {})[0]
