"""A small MLP policy for CartPole-v1 (4 → 64 → 64 → 2 logits), run batch-invariantly.

The weights (``policy_mlp_cartpole.pt``, a ``state_dict`` of about 20 KB) are produced by
``scripts/train_policy_mlp.py``. ``act`` takes a batch of observations from many episodes:
``greedy`` picks the arg-max logit; ``sample`` draws each row from its own
``torch.Generator`` seeded by ``sample_seed(episode_seed, step)`` — never a global RNG — so
a request's action depends only on its observation and its (episode seed, step), provided
the logits themselves are batch-invariant (see ``invariance``; check with ``choose_mode``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from agentcanvas.errors import NodeSetError
from agentcanvas.models import invariance
from agentcanvas.models.invariance import BatchMode, InvarianceReport, chunk_slices, pad_rows

__all__ = [
    "DEFAULT_WEIGHTS_PATH",
    "OBS_DIM",
    "ActMode",
    "PolicyMLP",
    "PolicyNet",
    "check_batch_invariance",
    "choose_mode",
    "load_policy",
    "sample_seed",
]

OBS_DIM = 4
N_ACTIONS = 2
HIDDEN = 64
SERVED_HEAD_WIDTH = 16
"""Outputs of the head as served: ``N_ACTIONS`` real ones, the rest zero weights, dropped.

Why: MKL's sgemm for a very narrow output (2 or 3 columns, measured) computes odd rows with
a different summation order than even rows, so a fixed-shape batch was still not
position-invariant (1 ulp on about half the rows at 3..12 rows). From 4 columns up, no row
differed at any position for 1..64 rows; 16 leaves a margin.
"""
DEFAULT_WEIGHTS_PATH = Path(__file__).with_name("policy_mlp_cartpole.pt")

ActMode = Literal["greedy", "sample"]


class PolicyNet(nn.Module):
    """The network alone: observation ``[B, 4]`` → action logits ``[B, 2]``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(OBS_DIM, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, N_ACTIONS),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.layers(obs)
        return result


def sample_seed(episode_seed: int, step: int) -> int:
    """The seed of the generator that samples one (episode, step): a 63-bit BLAKE2b digest."""
    digest = hashlib.blake2b(f"{episode_seed}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class PolicyMLP:
    """A ``PolicyNet`` in eval mode on one device, with naive, padded and single modes."""

    def __init__(
        self,
        net: PolicyNet,
        device: str,
        *,
        max_batch: int = 8,
        served_head_width: int = SERVED_HEAD_WIDTH,
    ) -> None:
        self.device = device
        self.max_batch = max_batch
        self._net = net.to(device).eval()
        self._body = net.layers[:-1]
        self._head_weight, self._head_bias = _widened_head(net.layers[-1], served_head_width)
        self._dummy_row = torch.zeros(OBS_DIM, dtype=torch.float32)

    def logits(self, obs: npt.ArrayLike, batch_mode: BatchMode) -> npt.NDArray[np.float32]:
        """Action logits, float32 ``[B, 2]``, computed in ``batch_mode``."""
        x = torch.from_numpy(_as_obs_batch(obs)).to(self.device)
        if x.shape[0] == 0:
            return np.zeros((0, N_ACTIONS), dtype=np.float32)
        if batch_mode == "naive":
            parts = [self._forward(x)]
        elif batch_mode == "single":
            parts = [self._forward(x[i : i + 1]) for i in range(x.shape[0])]
        elif batch_mode == "padded":
            chunks = chunk_slices(x.shape[0], self.max_batch)
            parts = [self._forward_padded(x[chunk]) for chunk in chunks]
        else:
            raise ValueError(f"unknown batch mode {batch_mode!r}")
        return np.ascontiguousarray(np.concatenate(parts))

    def act(
        self,
        obs: npt.ArrayLike,
        mode: ActMode,
        seeds: Sequence[tuple[int, int]] | None = None,
        *,
        batch_mode: BatchMode = "padded",
    ) -> npt.NDArray[np.int64]:
        """One action per row; ``sample`` needs one ``(episode_seed, step)`` per row."""
        logits = self.logits(obs, batch_mode)
        if mode == "greedy":
            greedy: npt.NDArray[np.int64] = np.argmax(logits, axis=1).astype(np.int64)
            return greedy
        if mode != "sample":
            raise ValueError(f"unknown act mode {mode!r}")
        if seeds is None or len(seeds) != logits.shape[0]:
            raise ValueError("sample mode needs one (episode_seed, step) per observation")
        actions = [_sample(row, *seed) for row, seed in zip(logits, seeds, strict=True)]
        return np.array(actions, dtype=np.int64)

    def _forward_padded(self, x: torch.Tensor) -> npt.NDArray[np.float32]:
        return self._forward(pad_rows(x, self.max_batch, self._dummy_row))[: x.shape[0]]

    def _forward(self, x: torch.Tensor) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            wide = nn.functional.linear(self._body(x), self._head_weight, self._head_bias)
            result: npt.NDArray[np.float32] = wide[:, :N_ACTIONS].float().cpu().numpy()
        return result


def _widened_head(head: nn.Module, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's weight and bias with zero rows appended up to ``width`` outputs."""
    if not isinstance(head, nn.Linear):
        raise TypeError(f"the policy's last layer must be nn.Linear, got {type(head).__name__}")
    if width < head.out_features:
        raise ValueError(f"served head width {width} < {head.out_features} outputs")
    weight = torch.zeros(
        width, head.in_features, dtype=head.weight.dtype, device=head.weight.device
    )
    bias = torch.zeros(width, dtype=head.weight.dtype, device=head.weight.device)
    with torch.no_grad():
        weight[: head.out_features] = head.weight
        bias[: head.out_features] = head.bias
    return weight, bias


def _as_obs_batch(obs: npt.ArrayLike) -> npt.NDArray[np.float32]:
    array = np.ascontiguousarray(obs, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != OBS_DIM:
        raise ValueError(f"observations must have shape [B, {OBS_DIM}], got {array.shape}")
    return array


def _sample(logits_row: npt.NDArray[np.float32], episode_seed: int, step: int) -> int:
    """Inverse-CDF draw from one row's softmax, computed per row so no batch can touch it."""
    generator = torch.Generator(device="cpu").manual_seed(sample_seed(episode_seed, step))
    probs = torch.softmax(torch.from_numpy(logits_row).double(), dim=0)
    u = torch.rand((), generator=generator, dtype=torch.float64)
    cdf = torch.cumsum(probs, dim=0)
    return min(int(torch.searchsorted(cdf, u, right=True)), N_ACTIONS - 1)


def load_policy(
    path: Path | None = None, device: Literal["cpu", "cuda"] | None = None
) -> PolicyMLP:
    """Load the committed CartPole weights (or ``path``) into a ``PolicyMLP``."""
    weights = path or DEFAULT_WEIGHTS_PATH
    target = device or ("cuda" if torch.cuda.is_available() else "cpu")
    net = PolicyNet()
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        net.load_state_dict(state)
    except (OSError, RuntimeError, KeyError) as exc:
        raise NodeSetError(f"cannot load policy weights from {weights}: {exc}") from exc
    return PolicyMLP(net, target)


def _forward_rows(policy: PolicyMLP) -> invariance.Forward[npt.NDArray[np.float32]]:
    def forward(
        rows: Sequence[npt.NDArray[np.float32]], mode: BatchMode
    ) -> npt.NDArray[np.float32]:
        return policy.logits(np.stack(rows), mode)

    return forward


def check_batch_invariance(
    policy: PolicyMLP, mode: BatchMode, probe_obs: npt.ArrayLike, max_batch: int
) -> InvarianceReport:
    """Bit-compare the logits of every (batch size ``1..max_batch``, position) with each alone."""
    rows = list(_as_obs_batch(probe_obs))
    return invariance.check_batch_invariance(
        _forward_rows(policy), mode, rows, max_batch, device=policy.device
    )


def choose_mode(policy: PolicyMLP, probe_obs: npt.ArrayLike, max_batch: int) -> InvarianceReport:
    """``padded`` when its logits are bit-exact here, else ``single``; the report says why."""
    rows = list(_as_obs_batch(probe_obs))
    return invariance.choose_mode(_forward_rows(policy), rows, max_batch, device=policy.device)
