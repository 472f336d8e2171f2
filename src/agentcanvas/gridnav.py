"""Breadth-first navigation on a MiniGrid-encoded grid (shared by the planner and the env's SPL).

The grid is MiniGrid's full encoding, ``grid[x, y] = (object_idx, color_idx, state)``. The agent
turns left (0), right (1) or moves forward (2); a goal is either "face a target cell" (BabyAI
GoTo) or "stand on a target cell" (MiniGrid goal squares).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX

LEFT, RIGHT, FORWARD = 0, 1, 2
IDX_TO_OBJECT = {v: k for k, v in OBJECT_TO_IDX.items()}
IDX_TO_COLOR = {v: k for k, v in COLOR_TO_IDX.items()}
PASSABLE = {"empty", "floor", "goal"}
OPEN_DOOR_STATE = 0
State = tuple[int, int, int]


def passable(grid: np.ndarray, x: int, y: int) -> bool:
    """Whether the agent may step onto cell (x, y)."""
    if not (0 <= x < grid.shape[0] and 0 <= y < grid.shape[1]):
        return False
    kind = IDX_TO_OBJECT.get(int(grid[x, y, 0]), "wall")
    if kind == "door":
        return int(grid[x, y, 2]) == OPEN_DOOR_STATE
    return kind in PASSABLE or (kind == "unseen" and False)


def find_cells(grid: np.ndarray, obj_type: str, color: str | None = None) -> list[tuple[int, int]]:
    """Cells holding an object of this type (and colour, when given), in x-then-y order."""
    type_idx = OBJECT_TO_IDX[obj_type]
    mask = grid[:, :, 0] == type_idx
    if color is not None:
        mask &= grid[:, :, 1] == COLOR_TO_IDX[color]
    return [(int(x), int(y)) for x, y in zip(*np.nonzero(mask), strict=True)]


def _successors(grid: np.ndarray, state: State) -> Iterable[tuple[int, State]]:
    x, y, d = state
    yield LEFT, (x, y, (d - 1) % 4)
    yield RIGHT, (x, y, (d + 1) % 4)
    dx, dy = DIR_TO_VEC[d]
    if passable(grid, x + int(dx), y + int(dy)):
        yield FORWARD, (x + int(dx), y + int(dy), d)


def _front(state: State) -> tuple[int, int]:
    dx, dy = DIR_TO_VEC[state[2]]
    return state[0] + int(dx), state[1] + int(dy)


def shortest_plan(
    grid: np.ndarray,
    start: State,
    targets: Sequence[tuple[int, int]],
    mode: str = "face",
) -> list[int] | None:
    """Actions from ``start`` to a goal state (``face`` or ``reach`` a target), or None.

    Ties are broken by the fixed action order (left, right, forward), so plans are
    deterministic.
    """
    goal = set(targets)
    if not goal:
        return None

    def reached(state: State) -> bool:
        return (_front(state) if mode == "face" else (state[0], state[1])) in goal

    if reached(start):
        return []
    parents: dict[State, tuple[State, int]] = {}
    queue: deque[State] = deque([start])
    seen = {start}
    while queue:
        state = queue.popleft()
        for action, nxt in _successors(grid, state):
            if nxt in seen:
                continue
            seen.add(nxt)
            parents[nxt] = (state, action)
            if reached(nxt):
                return _unwind(parents, start, nxt)
            queue.append(nxt)
    return None


def _unwind(parents: dict[State, tuple[State, int]], start: State, end: State) -> list[int]:
    actions: list[int] = []
    state = end
    while state != start:
        state, action = parents[state]
        actions.append(action)
    return actions[::-1]
