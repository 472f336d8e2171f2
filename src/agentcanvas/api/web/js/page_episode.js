// #/run/<id>/episode/<idx> — one episode: facts, video, frame player beside its firing log,
// per-node statistics, episode.json.

import { api, episodeHref, runApi, runHref } from "./api.js";
import { h, keyValues, notice, panel, put, statusBadge } from "./dom.js";
import { episodeOutcome } from "./episode_table.js";
import { endReasonText, tracebacks, whyText } from "./failure_words.js";
import { firingLog, nodeStats } from "./firing_log.js";
import { fmtDuration, fmtNum } from "./format.js";
import { episodeVideo, hasFrameAssets } from "./episode_video.js";
import { framePlayer } from "./frame_player.js";

function episodeFacts(e) {
  const [outcome] = episodeOutcome(e);
  const metrics = Object.entries(e.metrics ?? {}).map(([k, v]) => `${k} ${fmtNum(v)}`).join(" · ");
  const nodeErrors = Object.entries(e.node_errors ?? {}).map(([n, msg]) => h("li", {}, `${n}: ${msg}`));
  const why = whyText(e);
  return [
    keyValues([
      ["task", e.task], ["episode index", e.episode_index], ["seed", e.seed],
      ["status", statusBadge(e.status)], ["outcome", outcome],
      ["ended", h("span", { id: "end-reason", dataset: { endReason: e.end_reason ?? "" } },
        endReasonText(e) || "–", e.end_reason ? h("span", { class: "muted" }, ` (${e.end_reason})`) : null)],
      ["steps", `${e.steps} (budget ${e.step_budget ?? "–"})`], ["metrics", metrics || "–"],
      ["attempts", e.attempts ?? 1], ["instruction", e.instruction || "–"],
      ["duration", fmtDuration(e.duration_s)],
    ]),
    why && e.status !== "completed" ? notice(`Why it ended: ${why}`, "error") : null,
    nodeErrors.length ? h("ul", { class: "reasons" }, nodeErrors) : null,
    tracebackBlocks(e),
  ];
}

// Each traceback the record holds, as text in a <pre> (never parsed as HTML), open.
function tracebackBlocks(e) {
  return tracebacks(e).map((t) => h("details", { class: "traceback", open: true,
    dataset: { node: t.node ?? "" } },
  h("summary", {}, t.title), h("pre", { class: "json traceback-text", text: t.text })));
}

// Runs / <the run's name, or its id> / episode N, with the previous and next episodes.
function episodeCrumbs(ctx, runId, index) {
  const previous = index > 0
    ? h("a", { href: episodeHref(runId, index - 1), text: "‹ previous", id: "prev-episode" }) : null;
  const run = h("a", { href: runHref(runId), text: runId, title: runId, id: "crumb-run" });
  api(`${runApi(runId)}/meta`).then((meta) => {
    if (ctx.alive && meta.name) run.textContent = meta.name;
  }).catch(() => {}); // the id stays
  return h("nav", { class: "crumbs" }, h("a", { href: "#/", text: "Runs" }), " / ",
    run, ` / episode ${index}  `, previous, " ",
    h("a", { href: episodeHref(runId, index + 1), text: "next ›", id: "next-episode" }));
}

export function episodeView(ctx, runId, index) {
  const facts = panel(`Episode ${index}`, "episode-panel");
  const frames = panel("Frames", "frames-panel");
  const video = panel("Video", "video-panel");
  const log = panel("Firing log", "log-panel");
  const stats = panel("Per node", "node-panel");
  const raw = h("pre", { class: "json", id: "episode-json" });
  // The frames beside the firing log, held in view (sticky) while the log scrolls past.
  frames.el.classList.add("sticky-frames");
  ctx.root.append(episodeCrumbs(ctx, runId, index), h("div", { class: "grid two" }, facts.el, video.el),
    h("div", { class: "episode-main" }, frames.el, log.el),
    stats.el, h("details", { class: "panel" }, h("summary", {}, "episode.json"), raw));
  const base = `${runApi(runId)}/episodes/${index}`;
  Promise.all([api(base), api(`${base}/log`)]).then(([record, logData]) => {
    if (!ctx.alive) return;
    put(facts.body, episodeFacts(record));
    raw.textContent = JSON.stringify(record, null, 2);
    let player = null;
    const firing = firingLog(logData.records, (step) => player?.showStep(step));
    player = framePlayer(ctx, runId, index, record.assets, (step) => firing.follow(step));
    const torn = logData.torn_lines ? notice(`${logData.torn_lines} torn line(s) skipped`) : null;
    put(frames.body, player.el);
    put(video.body, episodeVideo(runId, index, hasFrameAssets(record.assets)));
    put(log.body, firing.el, torn);
    put(stats.body, nodeStats(logData.records));
  }).catch((err) => ctx.fail(facts.body, err));
}
