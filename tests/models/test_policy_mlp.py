"""The CartPole MLP policy: it balances, and its actions do not depend on the batch."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import pytest
import torch

from agentcanvas.models import invariance
from agentcanvas.models.invariance import BatchMode
from agentcanvas.models.policy_mlp import (
    DEFAULT_WEIGHTS_PATH,
    PolicyMLP,
    PolicyNet,
    check_batch_invariance,
    choose_mode,
    load_policy,
    sample_seed,
)

MAX_BATCH = 8
TEST_SEEDS = range(200_000, 200_005)


@pytest.fixture(scope="module")
def policy() -> PolicyMLP:
    return load_policy(device="cpu")


@pytest.fixture(scope="module")
def uncertain_obs(policy: PolicyMLP) -> npt.NDArray[np.float32]:
    """Observations where the policy is unsure, so sampling really samples.

    The cloned policy is sharp: its unsure band is narrow, so find where it switches along
    the pole angle on a coarse grid, then sample that interval finely.
    """
    coarse = _angle_line(np.linspace(-0.05, 0.05, 401))
    switch = int(np.argmax(np.diff(_p_right(policy, coarse) > 0.5)))
    fine = _angle_line(np.linspace(coarse[switch, 2], coarse[switch + 1, 2], 401))
    p_right = _p_right(policy, fine)
    unsure: npt.NDArray[np.float32] = fine[(p_right > 0.2) & (p_right < 0.8)]
    assert len(unsure) >= MAX_BATCH, "no observations near the decision boundary"
    picked: npt.NDArray[np.float32] = unsure[np.linspace(0, len(unsure) - 1, MAX_BATCH).astype(int)]
    return picked


def test_weights_file_is_small_and_loads() -> None:
    assert DEFAULT_WEIGHTS_PATH.stat().st_size < 64 * 1024
    assert isinstance(load_policy(device="cpu"), PolicyMLP)


def test_greedy_policy_balances_the_pole_in_a_shared_batch(policy: PolicyMLP) -> None:
    """Five episodes stepped in lock-step, their observations batched into one ``act``."""
    envs = [gym.make("CartPole-v1") for _ in TEST_SEEDS]
    obs = [env.reset(seed=seed)[0] for env, seed in zip(envs, TEST_SEEDS, strict=True)]
    returns = [0.0] * len(envs)
    alive = list(range(len(envs)))
    while alive:
        actions = policy.act(np.stack([obs[i] for i in alive]), "greedy")
        for i, action in zip(list(alive), actions, strict=True):
            obs[i], reward, terminated, truncated, _ = envs[i].step(int(action))
            returns[i] += float(reward)
            if terminated or truncated:
                alive.remove(i)
    assert np.mean(returns) >= 475, returns


def test_logits_are_bit_exact_in_the_chosen_mode(policy: PolicyMLP) -> None:
    probes = _cartpole_states(16)
    assert not check_batch_invariance(policy, "naive", probes, MAX_BATCH).ok
    report = choose_mode(policy, probes, MAX_BATCH)
    assert report.ok, report
    assert report.n_checked == len(probes) * sum(range(1, MAX_BATCH + 1))


def test_narrow_head_is_why_the_served_head_is_widened() -> None:
    """With the 2-logit head as trained, MKL makes a fixed-shape batch position-dependent."""
    net = PolicyNet()
    net.load_state_dict(torch.load(DEFAULT_WEIGHTS_PATH, weights_only=True))
    narrow = PolicyMLP(net, "cpu", served_head_width=2)
    report = choose_mode(narrow, _cartpole_states(16), MAX_BATCH)
    if report.mode == "padded":
        pytest.skip("this machine's sgemm is position-invariant even for a 2-column output")
    assert report.ok and report.mode == "single"
    assert "padded failed" in report.reason


def test_sampling_depends_on_seed_and_step_not_batch_position(
    policy: PolicyMLP, uncertain_obs: npt.NDArray[np.float32]
) -> None:
    seeds = [(7, step) for step in range(len(uncertain_obs))]
    batched = policy.act(uncertain_obs, "sample", seeds)
    order = np.arange(len(seeds))[::-1]
    reversed_batch = policy.act(uncertain_obs[order], "sample", [seeds[i] for i in order])
    assert np.array_equal(reversed_batch[::-1], batched)
    for i, seed in enumerate(seeds):
        assert policy.act(uncertain_obs[i : i + 1], "sample", [seed])[0] == batched[i]


def test_sampling_follows_the_policy_probabilities(
    policy: PolicyMLP, uncertain_obs: npt.NDArray[np.float32]
) -> None:
    obs = np.repeat(uncertain_obs[:1], 2000, axis=0)
    actions = policy.act(obs, "sample", [(seed, 0) for seed in range(len(obs))])
    p_right = float(_p_right(policy, obs[:1])[0])
    assert abs(float(actions.mean()) - p_right) < 0.05


def test_sample_needs_one_seed_per_row(policy: PolicyMLP) -> None:
    obs = np.zeros((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="one \\(episode_seed, step\\)"):
        policy.act(obs, "sample")
    with pytest.raises(ValueError, match="one \\(episode_seed, step\\)"):
        policy.act(obs, "sample", [(1, 0)])
    assert sample_seed(1, 2) == sample_seed(1, 2) != sample_seed(2, 1)


def test_choose_mode_falls_back_to_single_when_padded_is_not_exact() -> None:
    """An honest forward whose padded mode leaks the row position into the last bit."""

    def forward(rows: Sequence[float], mode: BatchMode) -> npt.NDArray[np.float32]:
        values = np.array(rows, dtype=np.float32)[:, None]
        if mode == "padded":
            values = values + np.arange(len(rows), dtype=np.float32)[:, None] * 1e-7
        return values

    report = invariance.choose_mode(forward, [1.0, 2.0, 3.0], 4, device="cpu")
    assert report.ok and report.mode == "single"
    assert "padded failed" in report.reason and "position 1" in report.reason


def _cartpole_states(n_states: int) -> npt.NDArray[np.float32]:
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    states = []
    for _ in range(n_states):
        states.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            obs, _ = env.reset(seed=len(states))
    return np.stack(states).astype(np.float32)


def _angle_line(thetas: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Observations at rest in the centre with the given pole angles."""
    obs = np.zeros((len(thetas), 4), dtype=np.float32)
    obs[:, 2] = thetas
    return obs


def _p_right(policy: PolicyMLP, obs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    p: npt.NDArray[np.float32] = torch.softmax(
        torch.from_numpy(policy.logits(obs, "single")), dim=1
    )[:, 1].numpy()
    return p
