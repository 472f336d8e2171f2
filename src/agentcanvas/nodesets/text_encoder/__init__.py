"""text_encoder: sentence embeddings from the bundled all-MiniLM-L6-v2 (shared, batched).

At start-up the server measures batch invariance (every batch size up to the maximum, every
position) and runs in ``padded`` mode when it holds, else falls back to ``single``; the mode is
reported through ``determinism`` and lands in each run's summary.

``ground`` picks, among the objects in view, the one whose description embeds closest to the
mission text (cosine similarity of unit vectors). It is computed once per episode and kept in
a keyed container evicted at the episode's end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentcanvas.nodes import BatchItem, NodeSet, PortSpec

MAX_SEQ_LEN = 32  # BabyAI missions and object names are far shorter
# The encoder's own check (padded, else single) on texts of every length class; the
# examples below then check each node's function the same way (server.batch_audit).
PROBE_TEXTS = [
    "go to the red ball",
    "a",
    "open the door on your left and pick up the green box behind it",
    "grey ball",
]


class EncoderState:
    """The loaded encoder, its measured batch mode, and per-episode grounding results."""

    def __init__(self) -> None:
        from agentcanvas.models.text_encoder import TextEncoder, choose_mode

        self.encoder = TextEncoder(max_seq_len=MAX_SEQ_LEN)
        self.report = choose_mode(self.encoder, PROBE_TEXTS, self.encoder.max_batch)
        self.mode = self.report.mode
        self.grounded: dict[str, dict[str, Any]] = {}


def _evict(state: EncoderState, episode_key: str) -> None:
    state.grounded.pop(episode_key, None)


def _modes(state: EncoderState) -> dict[str, str]:
    mode = state.mode if state.report.ok else f"{state.mode} (check failed)"
    return {"embed": mode, "ground": mode}


NODESET = NodeSet(
    name="text_encoder",
    version="0.1.0",
    parallelism="shared",
    description="all-MiniLM-L6-v2 sentence embeddings (offline, batch-invariant).",
    forkable=False,  # torch: spawned, never forked from a template
    state_factory=EncoderState,
    evict=_evict,
    determinism=_modes,
)


# Start-up check of each function (every batch size and position, bit for bit); two
# examples each keep it to some 40 padded forwards on top of the encoder's own check.
EMBED_EXAMPLES = [{"text": "go to the red ball"}, {"text": "open the door on your left"}]
GROUND_EXAMPLES = [
    {
        "mission": "go to the red ball",
        "objects": [{"type": "ball", "color": "red", "desc": "red ball"}],
    },
    {
        "mission": "go to a purple box",
        "objects": [{"type": "box", "color": "purple", "desc": "purple box"}],
    },
]


@NODESET.batched_node(
    "embed",
    inputs=[PortSpec(name="text", type="str")],
    outputs=[PortSpec(name="embedding", type="array", description="float32[384], unit length")],
    examples=EMBED_EXAMPLES,
)
def embed(
    items: list[BatchItem], config: dict[str, Any], state: EncoderState
) -> list[dict[str, Any]]:
    """Embed one text per request."""
    vectors = state.encoder.encode([str(inputs["text"]) for inputs, _ in items], state.mode)
    return [{"embedding": vectors[i]} for i in range(len(items))]


@NODESET.batched_node(
    "ground",
    inputs=[PortSpec(name="mission", type="str"), PortSpec(name="objects", type="list")],
    outputs=[PortSpec(name="target", type="dict"), PortSpec(name="score", type="float")],
    examples=GROUND_EXAMPLES,
)
def ground(
    items: list[BatchItem], config: dict[str, Any], state: EncoderState
) -> list[dict[str, Any]]:
    """The object whose description embeds closest to the mission."""
    # A local snapshot: an /evict arriving meanwhile must not change this batch's answers.
    found = {ctx.episode_key: state.grounded.get(ctx.episode_key) for _, ctx in items}
    todo = [i for i, (_, ctx) in enumerate(items) if found[ctx.episode_key] is None]
    texts: list[str] = []
    for i in todo:
        inputs = items[i][0]
        texts += [str(inputs["mission"])] + [str(o["desc"]) for o in inputs["objects"]]
    vectors = state.encoder.encode(texts, state.mode) if texts else np.zeros((0, 384))
    offset = 0
    for i in todo:
        inputs, ctx = items[i]
        n = len(inputs["objects"])
        mission, objs = vectors[offset], vectors[offset + 1 : offset + 1 + n]
        offset += 1 + n
        found[ctx.episode_key] = state.grounded[ctx.episode_key] = _best(
            inputs["objects"], mission, objs
        )
    return [dict(found[ctx.episode_key] or {}) for _, ctx in items]


def _best(objects: list[dict[str, Any]], mission: np.ndarray, objs: np.ndarray) -> dict[str, Any]:
    if not objects:
        return {"target": {"type": "none"}, "score": 0.0}
    scores = [float(np.dot(mission, objs[j])) for j in range(len(objects))]
    best = int(np.argmax(scores))
    chosen = objects[best]
    return {"target": {"type": chosen["type"], "color": chosen["color"]}, "score": scores[best]}
