// An episode's saved frames as a scrubbable player: slider, prev/next, play, arrow keys.

import { enc, runApi, withToken } from "./api.js";
import { h, notice, option } from "./dom.js";
import { clamp } from "./format.js";

const PLAY_FRAME_MS = 250;

const FRAME_RE = /^step(\d+)_(.+)\.(png|jpe?g|webp|gif)$/i;

function framesByView(assets) {
  const views = new Map();
  for (const name of assets ?? []) {
    const m = FRAME_RE.exec(name);
    if (!m) continue;
    if (!views.has(m[2])) views.set(m[2], []);
    views.get(m[2]).push({ name, step: Number(m[1]) });
  }
  views.forEach((frames) => frames.sort((a, b) => a.step - b.step));
  return views;
}

// Frames as a scrubbable player: slider, prev/next, play; arrow keys step too.
class FramePlayer {
  constructor(views, frameUrl, onStep) {
    Object.assign(this, { views, frameUrl, onStep, i: 0, timer: null });
    this.view = views.has("env") ? "env" : [...views.keys()][0];
    this.image = h("img", { id: "frame", alt: "episode frame", class: "frame" });
    this.slider = h("input", { type: "range", id: "frame-slider", min: 0, value: 0, "aria-label": "frame" });
    this.label = h("span", { class: "frame-label", id: "frame-label" });
    this.play = h("button", { type: "button", id: "frame-play", text: "▶ Play",
      onclick: () => (this.timer ? this.stop() : this.start()) });
    this.slider.addEventListener("input", () => this.jump(Number(this.slider.value)));
    this.el = h("div", { class: "player" }, h("div", { class: "frame-box" }, this.image),
      h("div", { class: "player-controls" }, this.stepButton("frame-prev", "◀ Prev", -1), this.play,
        this.stepButton("frame-next", "Next ▶", 1), this.slider, this.label, this.viewSelect()));
    this.onKey = (event) => {
      if (event.target.closest?.("input:not([type=range]), select, textarea")) return;
      const delta = { ArrowLeft: -1, ArrowRight: 1 }[event.key];
      if (delta) this.jump(this.i + delta);
    };
    document.addEventListener("keydown", this.onKey);
    this.show(0);
  }

  frames() {
    return this.views.get(this.view);
  }

  stepButton(id, text, delta) {
    return h("button", { type: "button", id, text, onclick: () => this.jump(this.i + delta) });
  }

  viewSelect() {
    if (this.views.size < 2) return null;
    const select = h("select", { "aria-label": "camera" }, [...this.views.keys()].map((v) => option(v)));
    select.addEventListener("change", () => { this.view = select.value; this.show(this.i); });
    return select;
  }

  show(i) {
    const list = this.frames();
    this.i = clamp(i, 0, list.length - 1);
    const frame = list[this.i];
    this.image.src = this.frameUrl(frame);
    this.slider.max = list.length - 1;
    this.slider.value = this.i;
    this.label.textContent = `frame ${this.i + 1}/${list.length} · step ${frame.step}`;
    if (list[this.i + 1]) new Image().src = this.frameUrl(list[this.i + 1]); // preload
    this.onStep(frame.step);
  }

  jump(i) {
    this.stop();
    this.show(i);
  }

  showStep(step) {
    const at = this.frames().findIndex((f) => f.step >= step);
    this.jump(at < 0 ? this.frames().length - 1 : at);
  }

  start() {
    if (this.i >= this.frames().length - 1) this.show(0);
    this.play.textContent = "❚❚ Pause";
    this.timer = setInterval(() => {
      if (this.i >= this.frames().length - 1) this.stop();
      else this.show(this.i + 1);
    }, PLAY_FRAME_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
    this.play.textContent = "▶ Play";
  }

  dispose() {
    this.stop();
    document.removeEventListener("keydown", this.onKey);
  }
}

export function framePlayer(ctx, runId, index, assets, onStep) {
  const views = framesByView(assets);
  if (!views.size) {
    const text = "No frames saved for this episode (start the run with “Save frames”, --save-frames "
      + "or --frames every|failures; under failures a successful episode keeps none).";
    return { el: notice(text), showStep() {} };
  }
  const frameUrl = (frame) => withToken(`${runApi(runId)}/episodes/${index}/assets/${enc(frame.name)}`);
  const player = new FramePlayer(views, frameUrl, onStep);
  ctx.onDispose(() => player.dispose());
  return player;
}
