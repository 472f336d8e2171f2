// An episode's saved frames as a scrubbable player: slider, prev/next, play, arrow keys.
// The server lists the views and their steps (…/frames) and sends one frame at a time as PNG
// (…/frames/<view>/<position>), from the recorded video or an older run's PNG files alike.

import { api, enc, runApi, withToken } from "./api.js";
import { h, notice, option } from "./dom.js";
import { hasFrameAssets } from "./episode_video.js";
import { clamp } from "./format.js";

const PLAY_FRAME_MS = 250;

// {views: [{view, steps}]} → Map view → [{step, position}], in order.
export function framesByView(listing) {
  const views = new Map();
  for (const { view, steps } of listing?.views ?? []) {
    if (steps.length) views.set(view, steps.map((step, position) => ({ step, position })));
  }
  return views;
}

// Frames as a scrubbable player: slider, prev/next, play; arrow keys step too.
class FramePlayer {
  constructor(views, main, frameUrl, onStep) {
    Object.assign(this, { views, frameUrl, onStep, i: 0, timer: null });
    this.view = views.has(main) ? main : [...views.keys()][0];
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
    this.image.src = this.frameUrl(this.view, frame);
    this.slider.max = list.length - 1;
    this.slider.value = this.i;
    this.label.textContent = `frame ${this.i + 1}/${list.length} · step ${frame.step}`;
    if (list[this.i + 1]) new Image().src = this.frameUrl(this.view, list[this.i + 1]); // preload
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

const NO_FRAMES = "No frames saved for this episode (start the run with “Save frames”, "
  + "--save-frames or --frames every|failures; under failures a successful episode keeps none).";

// The player, filled in once the server has listed the frames; `showStep` works before then
// (it does nothing) and after.
export function framePlayer(ctx, runId, index, assets, onStep) {
  if (!hasFrameAssets(assets)) return { el: notice(NO_FRAMES), showStep() {} };
  const base = `${runApi(runId)}/episodes/${index}/frames`;
  const frameUrl = (view, frame) => withToken(`${base}/${enc(view)}/${frame.position}`);
  const box = h("div", { class: "player-box" }, notice("loading frames…"));
  let player = null;
  api(base).then((listing) => {
    if (!ctx.alive) return;
    const views = framesByView(listing);
    if (!views.size) {
      box.replaceChildren(notice(NO_FRAMES));
      return;
    }
    player = new FramePlayer(views, listing.main, frameUrl, onStep);
    ctx.onDispose(() => player.dispose());
    box.replaceChildren(player.el);
  }).catch((err) => ctx.fail(box, err));
  return { el: box, showStep: (step) => player?.showStep(step) };
}
