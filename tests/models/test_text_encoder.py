"""The bundled MiniLM encoder: naive batching changes bits; the chosen mode does not."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from agentcanvas.models.text_encoder import (
    EMBEDDING_DIM,
    TextEncoder,
    check_batch_invariance,
    choose_mode,
)

# Different lengths on purpose: dynamic padding then changes with the batch's composition.
PROBE_TEXTS = [
    "push the cart left",
    "the pole is falling to the right quickly, act now",
    "hello",
    "A much longer sentence about reinforcement learning agents that balance poles on carts.",
    "go",
    "what is the capital of France?",
    "move right",
    "the quick brown fox jumps over the lazy dog",
]
MAX_BATCH = 8


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder(device="cpu", max_seq_len=64, max_batch=MAX_BATCH)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def n_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_modes_embed_alike_as_unit_vectors(encoder: TextEncoder) -> None:
    naive = encoder.encode(PROBE_TEXTS, "naive")
    assert naive.shape == (len(PROBE_TEXTS), EMBEDDING_DIM)
    assert naive.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(naive, axis=1), 1.0, atol=1e-5)
    for mode in ("padded", "single"):
        np.testing.assert_allclose(encoder.encode(PROBE_TEXTS, mode), naive, atol=1e-5)
    similar = float(naive[0] @ encoder.encode(["move the cart to the left"], "naive")[0])
    unrelated = float(naive[0] @ naive[5])
    assert similar > unrelated


def test_naive_batching_changes_the_bits(encoder: TextEncoder, n_threads: int) -> None:
    report = check_batch_invariance(encoder, "naive", PROBE_TEXTS, MAX_BATCH)
    assert not report.ok, "naive batching was bit-exact here: the demonstration needs a case"
    assert report.n_mismatched > 0
    assert report.first_mismatch is not None
    # Last bits only: a reordering of float additions, not a bug in the model.
    assert 0.0 < report.max_abs_diff < 1e-5
    assert report.n_threads == n_threads


def test_chosen_mode_is_bit_exact_at_every_batch_size_and_position(
    encoder: TextEncoder, n_threads: int
) -> None:
    report = choose_mode(encoder, PROBE_TEXTS, MAX_BATCH)
    assert report.ok, report
    assert report.mode in ("padded", "single")
    assert report.reason
    # Every probe at every position of every batch size 1..8.
    assert report.n_checked == len(PROBE_TEXTS) * sum(range(1, MAX_BATCH + 1))
    assert report.n_mismatched == 0 and report.max_abs_diff == 0.0
    full_batch = encoder.encode(PROBE_TEXTS[::-1], report.mode)
    for row, text in zip(full_batch, PROBE_TEXTS[::-1], strict=True):
        assert np.array_equal(row, encoder.encode([text], report.mode)[0])


def test_padded_runs_longer_lists_in_fixed_chunks(encoder: TextEncoder) -> None:
    texts = PROBE_TEXTS + PROBE_TEXTS[:3]
    batch = encoder.encode(texts, "padded")
    alone = np.concatenate([encoder.encode([t], "padded") for t in texts])
    assert np.array_equal(batch.view(np.uint32), alone.view(np.uint32))


def test_texts_are_truncated_to_max_seq_len(encoder: TextEncoder) -> None:
    long_text, longer_text = "word " * 100, "word " * 100 + "tail " * 50
    embeddings = encoder.encode([long_text, longer_text], "padded")
    assert np.array_equal(embeddings[0], embeddings[1])


def test_empty_input_and_unknown_mode(encoder: TextEncoder) -> None:
    assert encoder.encode([], "padded").shape == (0, EMBEDDING_DIM)
    with pytest.raises(ValueError, match="unknown mode"):
        encoder.encode(["x"], "dynamic")  # type: ignore[arg-type]
