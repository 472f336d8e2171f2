// A run's retry lineage on its page: "retry of <original>" (its name, else its id) when the
// run retries another (config.retry_of), and the runs that retry it (the run listing's
// retry_of filter), each a link, with the command-free way to compare them.

import { API, api, enc, runApi, runHref } from "./api.js";
import { h, put } from "./dom.js";

const MAX_RETRIES_SHOWN = 50;

function compareLink(a, b) {
  return h("a", { href: `#/compare?a=${enc(a)}&b=${enc(b)}`, class: "compare-retry", text: "compare" });
}

function retryOf(ctx, runId, original) {
  const link = h("a", { href: runHref(original), id: "retry-of-link", text: original, title: original });
  api(`${runApi(original)}/meta`).then((meta) => {
    if (ctx.alive && meta.name) link.textContent = meta.name;
  }).catch(() => {}); // the id stays
  return h("span", { id: "retry-of" }, "retry of ", link, " (", compareLink(original, runId), ")");
}

function retriesList(runId, rows) {
  const items = rows.map((r) => h("li", { dataset: { runId: r.run_id } },
    h("a", { href: runHref(r.run_id), text: r.name || r.run_id, title: r.run_id }),
    ` · ${r.status} · ${r.episodes_total ?? "?"} episode(s) (`, compareLink(runId, r.run_id), ")"));
  return h("div", { id: "retries" }, `retried by ${rows.length} run(s):`, h("ul", {}, items));
}

// The lineage line, refilled by `fill(summary)` (the retries are asked for once).
export function retryLinks(ctx, runId) {
  const el = h("div", { class: "retry-links muted" });
  const slots = { of: h("span"), by: h("span") };
  el.append(slots.of, slots.by);
  let shownOriginal = null;
  api(`${API}/runs?retry_of=${enc(runId)}&limit=${MAX_RETRIES_SHOWN}`).then((listing) => {
    // Filtered here too: a backend without the filter answers every run.
    const rows = listing.runs.filter((r) => r.config?.retry_of === runId);
    if (ctx.alive && rows.length) put(slots.by, retriesList(runId, rows));
  }).catch(() => {}); // an older backend: no list
  return {
    el,
    fill(summary) {
      const original = summary.config?.retry_of ?? null;
      if (original === shownOriginal) return;
      shownOriginal = original;
      put(slots.of, original ? retryOf(ctx, runId, original) : null);
    },
  };
}
