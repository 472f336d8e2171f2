// The run page's grid of failure videos: the first episodes that did not succeed, playing
// side by side — what a researcher opens first. Filled when the page opens and when the run ends.

import { API, api, enc, episodeHref } from "./api.js";
import { h, notice, panel, put } from "./dom.js";
import { videoPlayer } from "./episode_video.js";

const GRID_SIZE = 6;

function videoCard(runId, v) {
  const caption = h("figcaption", {},
    h("a", { href: episodeHref(runId, v.index), text: `ep ${v.index}` }),
    ` · ${v.task} #${v.episode_index} · ${v.outcome === "error" ? v.status : "failed"}`
    + ` · ${v.steps ?? "–"} steps`);
  const card = h("figure", { class: "video-card", dataset: { index: v.index } });
  const player = videoPlayer(runId, v.index, {
    onProblem: (text) => player.el.replaceWith(notice(`No video: ${text}`, "error")),
  });
  card.append(player.el, caption);
  return card;
}

function gridBody(runId, data) {
  if (!data.videos.length) {
    const why = data.failed === 0 ? "Every episode so far succeeded: no failure to show."
      : data.frames === "none"
        ? `${data.failed} episode(s) did not succeed, but this run kept no frames `
          + "(start it with --save-frames or --frames failures)."
        : `${data.failed} episode(s) did not succeed; none has frames yet.`;
    return notice(why);
  }
  const more = data.failed > data.videos.length
    ? h("p", { class: "muted" }, `First ${data.videos.length} of ${data.failed} episodes that did `
      + "not succeed; the others are in the episode table (outcome failure / error).")
    : null;
  return [h("div", { class: "video-grid", id: "failure-video-grid" },
    data.videos.map((v) => videoCard(runId, v))), more];
}

// Adds the panel after `anchor` and keeps it current; called once by the run page.
export function failureVideos(ctx, runId, anchor) {
  const grid = panel("Failure videos", "failure-videos-panel");
  anchor.after(grid.el);
  const load = () => api(`${API}/runs/${enc(runId)}/failure_videos?limit=${GRID_SIZE}`)
    .then((data) => ctx.alive && put(grid.body, gridBody(runId, data)))
    .catch((err) => ctx.fail(grid.body, err));
  put(grid.body, notice("loading…"));
  load();
  ctx.listen((m) => {
    if (m.source === "eval" && m.run_id === runId && m.type === "eval_complete") load();
  });
}
