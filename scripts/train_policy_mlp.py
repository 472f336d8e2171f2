"""Train the CartPole-v1 MLP policy by behaviour cloning with DAgger; write its weights.

The expert is a hand-written linear controller (push right when
``0.1 x + 0.5 x_dot + 3 theta + theta_dot > 0``; it reaches 500 on every test seed). Round 0
clones it on its own states; each later round rolls out a mix of learner and expert
(the expert's share halves each round), labels every visited state with the expert's
action and retrains on the aggregate — so the learner sees, and learns to leave, the states
its own mistakes lead to. One thread, fixed seeds, deterministic algorithms: the same
weights on every run on the same machine. About a minute on two CPU cores.

Usage: python scripts/train_policy_mlp.py [--out PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch

from agentcanvas.models.policy_mlp import DEFAULT_WEIGHTS_PATH, PolicyNet, load_policy

SEED = 0
N_ROUNDS = 5
N_EPISODES_PER_ROUND = 10
N_EPOCHS = 30
BATCH_SIZE = 256
LEARNING_RATE = 3e-3
TRAIN_SEED_BASE = 0
TEST_SEED_BASE = 100_000
N_TEST_EPISODES = 20
TARGET_MEAN_RETURN = 475.0
EXPERT_WEIGHTS = np.array([0.1, 0.5, 3.0, 1.0], dtype=np.float64)

Obs = npt.NDArray[np.float32]


def expert_action(obs: Obs) -> int:
    """The hand-written controller the policy imitates."""
    return int(float(np.dot(EXPERT_WEIGHTS, obs)) > 0.0)


def learner_action(net: PolicyNet, obs: Obs) -> int:
    with torch.inference_mode():
        return int(torch.argmax(net(torch.from_numpy(obs[None, :]))[0]))


def collect(
    net: PolicyNet | None, expert_share: float, episode_seeds: range, rng: np.random.Generator
) -> Obs:
    """States visited by a learner/expert mix (per step, expert with ``expert_share``)."""
    env = gym.make("CartPole-v1")
    states: list[Obs] = []
    for seed in episode_seeds:
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            states.append(obs.astype(np.float32))
            if net is None or rng.random() < expert_share:
                action = expert_action(obs)
            else:
                action = learner_action(net, obs)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    return np.stack(states)


def fit(net: PolicyNet, states: Obs, generator: torch.Generator) -> float:
    """Cross-entropy on the expert's labels; returns the last epoch's mean loss."""
    x = torch.from_numpy(states)
    y = torch.tensor([expert_action(s) for s in states], dtype=torch.int64)
    optimiser = torch.optim.Adam(net.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    net.train()
    mean_loss = 0.0
    for _ in range(N_EPOCHS):
        order = torch.randperm(len(x), generator=generator)
        losses = []
        for start in range(0, len(x), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            loss = loss_fn(net(x[idx]), y[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
        mean_loss = float(np.mean(losses))
    net.eval()
    return mean_loss


def evaluate(weights: Path) -> list[float]:
    """Greedy returns of the saved policy (as served: padded batch mode) on the test seeds."""
    policy = load_policy(weights, device="cpu")
    env = gym.make("CartPole-v1")
    returns = []
    for seed in range(TEST_SEED_BASE, TEST_SEED_BASE + N_TEST_EPISODES):
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action = int(policy.act(obs[None, :], "greedy")[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def train(out: Path) -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    generator = torch.Generator().manual_seed(SEED)
    net = PolicyNet()
    dataset = np.zeros((0, 4), dtype=np.float32)
    for round_index in range(N_ROUNDS):
        seeds = range(
            TRAIN_SEED_BASE + round_index * N_EPISODES_PER_ROUND,
            TRAIN_SEED_BASE + (round_index + 1) * N_EPISODES_PER_ROUND,
        )
        learner = None if round_index == 0 else net
        dataset = np.concatenate([dataset, collect(learner, 0.5**round_index, seeds, rng)])
        loss = fit(net, dataset, generator)
        print(f"round {round_index}: {len(dataset)} states, loss {loss:.4f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(net.state_dict(), out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS_PATH)
    args = parser.parse_args()
    started = time.perf_counter()
    train(args.out)
    returns = evaluate(args.out)
    mean_return = float(np.mean(returns))
    print(
        f"greedy return over {N_TEST_EPISODES} test episodes: mean {mean_return:.1f}, "
        f"min {min(returns):.0f} (target >= {TARGET_MEAN_RETURN:.0f}); "
        f"{time.perf_counter() - started:.0f} s"
    )
    if mean_return < TARGET_MEAN_RETURN:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
