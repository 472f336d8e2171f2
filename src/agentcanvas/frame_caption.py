"""Env frames people can see: scaled up to a visible size, with a caption strip under them.

A bottom module (numpy and Pillow only) that env node sets call when their ``render`` field is
on. The caption says what the frame shows: the step, the action that led to it (by name when
the env has names) and the reward it earned. The picture itself is not painted over, so a
viewer can still read every cell; the strip sits beside it, below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

import numpy as np
from PIL import Image, ImageDraw, ImageFont

MIN_FRAME_PX: Final = 256
"""Shortest side of a saved frame (before its caption) for the built-in envs."""
CAPTION_FONT_PX: Final = 15
CAPTION_PAD_PX: Final = 6
_CAPTION_BG: Final = (24, 26, 32)
_CAPTION_FG: Final = (240, 240, 240)


def upscaled(frame: np.ndarray, min_side_px: int = MIN_FRAME_PX) -> np.ndarray:
    """``frame`` enlarged by a whole factor (nearest neighbour, no blur) until its shortest
    side reaches ``min_side_px``; unchanged when it is already that large."""
    shortest = min(frame.shape[0], frame.shape[1])
    factor = max(1, math.ceil(min_side_px / max(shortest, 1)))
    if factor == 1:
        return frame
    return np.repeat(np.repeat(frame, factor, axis=0), factor, axis=1)


def caption_lines(step: int, action: str | None, reward: float, total: float) -> list[str]:
    """``["step 12 · forward", "reward +0.000 · return 0.850"]``; ``start`` at the first observe."""
    if action is None:
        return [f"step {step} · start", f"return {total:.3f}"]
    return [f"step {step} · {action}", f"reward {reward:+.3f} · return {total:.3f}"]


def captioned(frame: np.ndarray, lines: Sequence[str]) -> np.ndarray:
    """``frame`` (H×W×3 uint8) with a dark strip below it holding ``lines`` of text."""
    rgb = np.ascontiguousarray(frame[..., :3], dtype=np.uint8)
    height, width = rgb.shape[:2]
    font = _font()
    line_px = CAPTION_FONT_PX + 4
    strip_px = 2 * CAPTION_PAD_PX + line_px * max(1, len(lines))
    canvas = Image.new("RGB", (width, height + strip_px), _CAPTION_BG)
    canvas.paste(Image.fromarray(rgb), (0, 0))
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(lines):
        y = height + CAPTION_PAD_PX + i * line_px
        draw.text((CAPTION_PAD_PX, y), _fit(draw, line, font, width), fill=_CAPTION_FG, font=font)
    return np.asarray(canvas)


def _fit(
    draw: ImageDraw.ImageDraw,
    text: str,
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont,
    px: int,
) -> str:
    """``text`` cut (with an ellipsis) so that it fits the frame's width."""
    room = px - 2 * CAPTION_PAD_PX
    if draw.textlength(text, font=font) <= room:
        return text
    while text and draw.textlength(text + "…", font=font) > room:
        text = text[:-1]
    return text + "…"


@lru_cache(maxsize=1)
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=CAPTION_FONT_PX)
