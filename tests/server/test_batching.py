"""Flush decisions of the shared inference server: plain synchronous code, no event loop.

``flush_due_at`` answers *when* a queue should flush (``<= now`` means now, None means the
queue is empty). The futures are ``concurrent.futures.Future``: real futures that need no
event loop, which is what keeps this module loop-free.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from agentcanvas.errors import ConfigError
from agentcanvas.server.batch_audit import AuditSettings, audit_settings_from_env
from agentcanvas.server.batching import (
    BatchQueue,
    FlushPolicy,
    PendingRequest,
    flush_due_at,
    policy_from_env,
)

OURS = FlushPolicy(kind="ours", max_batch=8, cap_s=0.010, window_s=0.050)
RESTART = FlushPolicy(kind="restart_on_submit", max_batch=8, cap_s=0.010, window_s=0.050)
NONE = FlushPolicy(kind="none", max_batch=8)


def queue_of(*arrivals: tuple[str, float]) -> BatchQueue:
    """A queue holding one request per ``(client, arrived_s)``, in that order."""
    queue = BatchQueue()
    for client, arrived_s in arrivals:
        queue.pending.append(PendingRequest(client, arrived_s, f"{client}@{arrived_s}", Future()))
    return queue


def first_flush_s(policy: FlushPolicy, arrivals_s: list[float], attached: int) -> float:
    """Event-driven replay: when the queue first flushes while ``arrivals_s`` come in.

    Each arrival comes from its own client (so "every attached client waiting" only fires
    once ``attached`` of them wait). Between two arrivals the queue flushes as soon as its
    due time is reached; after the last one, at its due time.
    """
    queue = BatchQueue()
    for i, arrived_s in enumerate(arrivals_s):
        queue.pending.append(PendingRequest(f"c{i}", arrived_s, i, Future()))
        due = flush_due_at(policy, queue, attached, arrived_s)
        assert due is not None
        next_s = arrivals_s[i + 1] if i + 1 < len(arrivals_s) else float("inf")
        if due < next_s:  # due before anything else changes the queue
            return max(float(due), arrived_s)
    raise AssertionError("unreachable: the last arrival always comes due")


# -- none: no coalescing -----------------------------------------------------------------


def test_none_flushes_every_request_at_once() -> None:
    assert flush_due_at(NONE, queue_of(("a", 1.0)), attached=8, now_s=1.0) == 1.0
    # even with many attached clients and others still to come
    assert flush_due_at(NONE, queue_of(("a", 1.0), ("b", 1.0)), attached=8, now_s=1.001) == 1.001


def test_an_empty_queue_is_never_due() -> None:
    for policy in (NONE, RESTART, OURS):
        assert flush_due_at(policy, BatchQueue(), attached=4, now_s=0.0) is None


# -- full batch --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [OURS, RESTART], ids=["ours", "restart_on_submit"])
def test_a_full_batch_flushes_at_once(policy: FlushPolicy) -> None:
    seven = [(f"c{i}", 1.0) for i in range(7)]
    # 7 of 8 slots filled out of 20 attached clients: not yet
    assert flush_due_at(policy, queue_of(*seven), attached=20, now_s=1.001) > 1.001
    full = queue_of(*seven, ("c7", 1.001))
    assert flush_due_at(policy, full, attached=20, now_s=1.001) == 1.001


def test_a_full_batch_counts_requests_not_clients() -> None:
    one_client = queue_of(*[("a", 1.0)] * 8)
    assert flush_due_at(OURS, one_client, attached=20, now_s=1.0) == 1.0


# -- ours: every attached client waiting -------------------------------------------------


def test_ours_flushes_when_every_attached_client_has_a_request_waiting() -> None:
    three_of_four = queue_of(("a", 1.0), ("b", 1.001), ("c", 1.002))
    assert flush_due_at(OURS, three_of_four, attached=4, now_s=1.002) == pytest.approx(1.010)
    all_four = queue_of(("a", 1.0), ("b", 1.001), ("c", 1.002), ("d", 1.003))
    assert flush_due_at(OURS, all_four, attached=4, now_s=1.003) == 1.003


def test_ours_counts_distinct_clients_not_requests() -> None:
    # a's two requests do not stand in for b
    queue = queue_of(("a", 1.0), ("a", 1.001))
    assert flush_due_at(OURS, queue, attached=2, now_s=1.001) == pytest.approx(1.010)


def test_restart_on_submit_ignores_who_is_waiting() -> None:
    all_four = queue_of(("a", 1.0), ("b", 1.001), ("c", 1.002), ("d", 1.003))
    assert flush_due_at(RESTART, all_four, attached=4, now_s=1.003) == pytest.approx(1.053)


# -- one attached client: no added wait --------------------------------------------------


@pytest.mark.parametrize("attached", [0, 1])
def test_ours_adds_no_wait_with_one_client(attached: int) -> None:
    assert flush_due_at(OURS, queue_of(("w0", 5.0)), attached=attached, now_s=5.0) == 5.0


def test_restart_on_submit_adds_the_whole_window_with_one_client() -> None:
    due = flush_due_at(RESTART, queue_of(("w0", 5.0)), attached=1, now_s=5.0)
    assert due == pytest.approx(5.0 + RESTART.window_s)


# -- the cap: from the FIRST arrival (ours) vs a window restarted on every submit --------


def test_ours_caps_the_wait_from_the_first_arrival() -> None:
    queue = queue_of(("a", 1.0), ("b", 1.004), ("c", 1.008))
    # later arrivals do not push the deadline
    assert flush_due_at(OURS, queue, attached=4, now_s=1.008) == pytest.approx(1.0 + OURS.cap_s)


def test_restart_on_submit_restarts_the_window_on_every_submit() -> None:
    queue = queue_of(("a", 1.0), ("b", 1.004), ("c", 1.008))
    assert flush_due_at(RESTART, queue, attached=4, now_s=1.008) == pytest.approx(
        1.008 + RESTART.window_s
    )


@pytest.mark.parametrize("n_arrivals", [3, 25, 250])
def test_while_requests_keep_arriving_the_note_has_no_upper_bound_and_ours_has(
    n_arrivals: int,
) -> None:
    # One request every 40 ms (inside the 50 ms window) from 1000 attached clients, with room
    # in the batch: nothing but time makes these queues flush.
    restart = FlushPolicy(kind="restart_on_submit", max_batch=10_000, window_s=0.050)
    ours = FlushPolicy(kind="ours", max_batch=10_000, cap_s=0.010)
    arrivals_s = [i * 0.040 for i in range(n_arrivals)]
    # the note's first request waits until the stream stops, however long it runs
    assert first_flush_s(restart, arrivals_s, attached=1000) == pytest.approx(
        arrivals_s[-1] + restart.window_s
    )
    # ours: cap_s after the first arrival, whatever comes after it
    assert first_flush_s(ours, arrivals_s, attached=1000) == pytest.approx(ours.cap_s)
    late = [10.0 + t for t in arrivals_s]
    assert first_flush_s(ours, late, attached=1000) == pytest.approx(10.0 + ours.cap_s)


# -- ours: a request queued behind its queue's running pass ----------------------------


def test_ours_counts_the_cap_from_the_end_of_the_pass_a_request_queued_behind() -> None:
    # b and c arrived at 1.00 and 1.01 while their queue's pass ran; it ended at 1.05
    queue = queue_of(("b", 1.00), ("c", 1.01))
    queue.last_pass_end_s = 1.05
    # the clients that pass served get cap_s to come back and join
    assert flush_due_at(OURS, queue, attached=4, now_s=1.05) == pytest.approx(1.05 + OURS.cap_s)
    # a pass that ended before the first arrival changes nothing
    queue.last_pass_end_s = 0.90
    assert flush_due_at(OURS, queue, attached=4, now_s=1.05) == pytest.approx(1.00 + OURS.cap_s)


def test_after_a_pass_full_or_all_waiting_still_flush_at_once() -> None:
    queue = queue_of(("a", 1.0), ("b", 1.0))
    queue.last_pass_end_s = 1.05
    assert flush_due_at(OURS, queue, attached=2, now_s=1.05) == 1.05
    assert flush_due_at(OURS, queue, attached=1, now_s=1.05) == 1.05
    full = queue_of(*[(f"c{i}", 1.0) for i in range(8)])
    full.last_pass_end_s = 1.05
    assert flush_due_at(OURS, full, attached=20, now_s=1.05) == 1.05


def test_the_note_and_none_ignore_when_the_last_pass_ended() -> None:
    queue = queue_of(("b", 1.00), ("c", 1.01))
    queue.last_pass_end_s = 1.05
    assert flush_due_at(RESTART, queue, attached=4, now_s=1.05) == pytest.approx(1.06)
    assert flush_due_at(NONE, queue, attached=4, now_s=1.05) == 1.05


# -- cancelled requests and taking a batch -----------------------------------------------


def test_cancelled_requests_are_dropped_before_deciding() -> None:
    queue = queue_of(("a", 1.0), ("b", 1.002))
    queue.pending[0].future.cancel()
    # only b is live: the cap counts from b's arrival, and b alone is not "all waiting"
    assert flush_due_at(OURS, queue, attached=2, now_s=1.002) == pytest.approx(1.012)
    assert [r.client for r in queue.pending] == ["b"]
    queue.pending[0].future.cancel()
    assert flush_due_at(OURS, queue, attached=2, now_s=1.003) is None


def test_take_returns_live_requests_in_arrival_order_up_to_max_batch() -> None:
    queue = queue_of(*[(f"c{i}", float(i)) for i in range(5)])
    queue.pending[1].future.cancel()
    assert [r.client for r in queue.take(3)] == ["c0", "c2", "c3"]
    assert [r.client for r in queue.take(3)] == ["c4"]
    assert queue.take(3) == []


# -- configuration -----------------------------------------------------------------------


def test_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCANVAS_FLUSH_POLICY", raising=False)
    monkeypatch.delenv("AGENTCANVAS_MAX_BATCH", raising=False)
    assert policy_from_env() == FlushPolicy(kind="ours", max_batch=8)
    monkeypatch.setenv("AGENTCANVAS_FLUSH_POLICY", "restart_on_submit")
    monkeypatch.setenv("AGENTCANVAS_MAX_BATCH", "4")
    assert policy_from_env() == FlushPolicy(kind="restart_on_submit", max_batch=4)
    monkeypatch.setenv("AGENTCANVAS_FLUSH_POLICY", "fastest")
    with pytest.raises(ConfigError, match="AGENTCANVAS_FLUSH_POLICY"):
        policy_from_env()


@pytest.mark.parametrize("value", ["0", "-3", "eight", "2.5", "100000", " "])
def test_a_bad_max_batch_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.delenv("AGENTCANVAS_FLUSH_POLICY", raising=False)
    monkeypatch.setenv("AGENTCANVAS_MAX_BATCH", value)
    if value.strip() == "":  # empty means unset: the default
        assert policy_from_env().max_batch == 8
        return
    with pytest.raises(ConfigError, match="AGENTCANVAS_MAX_BATCH must be an integer from 1"):
        policy_from_env()


def test_a_flush_policy_refuses_an_empty_batch_and_a_negative_cap() -> None:
    with pytest.raises(ConfigError, match="max_batch"):
        FlushPolicy(max_batch=0)
    with pytest.raises(ConfigError, match="cap_s"):
        FlushPolicy(cap_s=float("nan"))


@pytest.mark.parametrize(
    ("rate", "seed", "field"),
    [
        ("1.5", "", "AGENTCANVAS_AUDIT_RATE"),
        ("nan", "", "AGENTCANVAS_AUDIT_RATE"),
        ("often", "", "AGENTCANVAS_AUDIT_RATE"),
        ("0.5", "-1", "AGENTCANVAS_AUDIT_SEED"),
    ],
)
def test_bad_audit_settings_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, rate: str, seed: str, field: str
) -> None:
    monkeypatch.setenv("AGENTCANVAS_AUDIT_RATE", rate)
    monkeypatch.setenv("AGENTCANVAS_AUDIT_SEED", seed)
    with pytest.raises(ConfigError, match=field):
        audit_settings_from_env()


def test_audit_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTCANVAS_AUDIT_RATE", raising=False)
    monkeypatch.delenv("AGENTCANVAS_AUDIT_SEED", raising=False)
    assert audit_settings_from_env() == AuditSettings(rate=0.0625, seed=0)
    monkeypatch.setenv("AGENTCANVAS_AUDIT_RATE", "0")
    monkeypatch.setenv("AGENTCANVAS_AUDIT_SEED", "7")
    assert audit_settings_from_env() == AuditSettings(rate=0.0, seed=7)
