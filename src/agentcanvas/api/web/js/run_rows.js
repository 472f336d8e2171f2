// Table rows of runs, one column spec each; live updates refill the rows in place.

import { runHref } from "./api.js";
import { h, put, statusBadge } from "./dom.js";
import { fmtNum, fmtTime, truncate } from "./format.js";
import { allEpisodesEnded, etaText, successDetail, successParts } from "./run_facts.js";
import { healthBadge, progressBox, runActions, setProgress } from "./run_summary.js";

export const DIFF_PREFIX = "diff:";

// A run's name (or its id), its tags as chips, its note as the tooltip.
export function runLabel(s, href = runHref(s.run_id)) {
  const link = h("a", { href, text: s.name || s.run_id, class: "run-link", title: s.run_id });
  return h("span", { class: "run-label", title: s.note || "" }, link,
    s.name ? h("small", { class: "run-id" }, s.run_id) : null,
    s.tags?.length ? h("span", { class: "tags" }, s.tags.map((t) => tagChip(t))) : null);
}

// Success over the scored episodes, its 95 % interval under it, what it covers and the errors
// it leaves out; the title adds the rate with errors as failures.
export function fillSuccess(td, s) {
  const parts = successParts(s);
  put(td, h("span", { class: "rate" }, parts.rate),
    parts.interval ? h("span", { class: "ci interval" }, parts.interval) : null,
    parts.coverage ? h("span", { class: "ci coverage" }, parts.coverage) : null,
    parts.errors ? h("span", { class: "ci errors" }, parts.errors) : null);
  td.title = successDetail(s);
}

export function tagChip(tag) {
  return h("span", { class: "tag", dataset: { tag } }, tag);
}

function diffValue(value) {
  if (value === null || value === undefined) return "–";
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "boolean") return String(value);
  return typeof value === "object" ? JSON.stringify(value) : fmtNum(value);
}

// A column for one config field that differs between runs of the same graph.
function diffColumn(name) {
  const key = name.slice(DIFF_PREFIX.length);
  return { head: key, num: false, diff: true, fill: (td, s) => {
    if (!s.config_diff) return; // a live update without listing fields keeps the cell
    const differs = s.config_diff && key in s.config_diff;
    td.textContent = differs ? diffValue(s.config_diff[key]) : "";
  } };
}

// Why a run is damaged (the file and field) or ended without finishing (its error).
function statusWhy(s) {
  const why = s.damaged || (["aborted", "failed"].includes(s.status) ? s.error : "");
  return why ? h("small", { class: "status-why", title: why, text: truncate(why, 90) }) : "";
}

const column = (name) => (name.startsWith(DIFF_PREFIX) ? diffColumn(name) : RUN_COLUMNS[name]);

// Columns of run rows: `build` makes static content once, `fill` refreshes live content.
const RUN_COLUMNS = {
  pick: { head: "", build: (s, on) => h("input", {
    type: "checkbox", class: "pick", value: s.run_id, checked: on.isPicked(s.run_id),
    "aria-label": `pick ${s.run_id} for comparison`, onchange: on.pick,
  }) },
  run: { head: "Run", build: (s) => runLabel(s) },
  status: { head: "Status", fill: (td, s) => td.replaceChildren(statusBadge(s.status), statusWhy(s)) },
  health: { head: "Health", fill: (td, s) => td.replaceChildren(healthBadge(s)) },
  graph: { head: "Graph", fill: (td, s) => { td.textContent = s.graph_name ?? ""; } },
  workers: { head: "Workers", num: true,
    fill: (td, s) => { td.textContent = s.config?.worker_count ?? s.worker_count ?? ""; } },
  progress: { head: "Episodes", build: () => progressBox(),
    fill: (td, s, source) => setProgress(td.firstChild, s, source) },
  success: { head: "Success [95 %]", num: true, fill: fillSuccess },
  eta: { head: "ETA", num: true, fill: (td, s) => { td.textContent = etaText(s); } },
  started: { head: "Started", fill: (td, s) => { td.textContent = fmtTime(s.timings?.started_at); } },
  priority: { head: "Priority", num: true, fill: (td, s) => { td.textContent = s.priority ?? 0; } },
  waiting: { head: "Waiting for", fill: (td, s) => { td.textContent = s.waiting_reason || "–"; } },
  actions: { head: "", fill: (td, s, _source, on) => {
    const key = `${s.status}/${allEpisodesEnded(s)}`;
    if (td.dataset.status === key) return; // keep buttons (and a pending confirm) stable
    td.dataset.status = key;
    td.replaceChildren(...runActions(s, on.action));
  } },
};

function cellClass(spec) {
  return spec.num ? "num" : spec.diff ? "diff" : undefined;
}

export function runTableHead(columns) {
  return h("thead", {}, h("tr", {}, columns.map((name) => {
    const spec = column(name);
    return h("th", { scope: "col", class: cellClass(spec),
      title: spec.diff ? "differs between runs of this graph" : undefined }, spec.head);
  })));
}

export function runRow(columns, summary, on) {
  const tr = h("tr", { dataset: { runId: summary.run_id } });
  for (const name of columns) {
    const spec = column(name);
    // data-label names the cell where a phone shows the row as a card, without its header
    tr.append(h("td", { "data-col": name, "data-label": spec.head || undefined, class: cellClass(spec) },
      spec.build ? spec.build(summary, on) : null));
  }
  fillRunRow(tr, summary, "load", on);
  return tr;
}

export function fillRunRow(tr, summary, source, on) {
  for (const td of tr.children) column(td.dataset.col).fill?.(td, summary, source, on);
}

export function rowsFor(container, runId) {
  return container.querySelectorAll(`tr[data-run-id="${CSS.escape(runId)}"]`);
}
