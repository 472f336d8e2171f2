// Table rows of runs, one column spec each; live updates refill the rows in place.

import { runHref } from "./api.js";
import { h, statusBadge } from "./dom.js";
import { fmtTime } from "./format.js";
import { etaText, progressBox, runActions, setProgress, successText } from "./run_summary.js";

// Columns of run rows: `build` makes static content once, `fill` refreshes live content.
const RUN_COLUMNS = {
  pick: { head: "", build: (s, on) => h("input", {
    type: "checkbox", class: "pick", value: s.run_id, checked: on.isPicked(s.run_id),
    "aria-label": `pick ${s.run_id} for comparison`, onchange: on.pick,
  }) },
  run: { head: "Run", build: (s) => h("a", { href: runHref(s.run_id), text: s.run_id }) },
  status: { head: "Status", fill: (td, s) => td.replaceChildren(statusBadge(s.status)) },
  graph: { head: "Graph", fill: (td, s) => { td.textContent = s.graph_name ?? ""; } },
  workers: { head: "Workers", num: true,
    fill: (td, s) => { td.textContent = s.config?.worker_count ?? s.worker_count ?? ""; } },
  progress: { head: "Episodes", build: () => progressBox(),
    fill: (td, s, source) => setProgress(td.firstChild, s, source) },
  success: { head: "Success", num: true, fill: (td, s) => { td.textContent = successText(s); } },
  eta: { head: "ETA", num: true, fill: (td, s) => { td.textContent = etaText(s); } },
  started: { head: "Started", fill: (td, s) => { td.textContent = fmtTime(s.timings?.started_at); } },
  priority: { head: "Priority", num: true, fill: (td, s) => { td.textContent = s.priority ?? 0; } },
  waiting: { head: "Waiting for", fill: (td, s) => { td.textContent = s.waiting_reason || "–"; } },
  actions: { head: "", fill: (td, s, _source, on) => {
    if (td.dataset.status === s.status) return; // keep buttons (and a pending confirm) stable
    td.dataset.status = s.status;
    td.replaceChildren(...runActions(s, on.action));
  } },
};

export function runTableHead(columns) {
  return h("thead", {}, h("tr", {}, columns.map((name) =>
    h("th", { scope: "col", class: RUN_COLUMNS[name].num ? "num" : undefined }, RUN_COLUMNS[name].head))));
}

export function runRow(columns, summary, on) {
  const tr = h("tr", { dataset: { runId: summary.run_id } });
  for (const name of columns) {
    const column = RUN_COLUMNS[name];
    tr.append(h("td", { "data-col": name, class: column.num ? "num" : undefined },
      column.build ? column.build(summary, on) : null));
  }
  fillRunRow(tr, summary, "load", on);
  return tr;
}

export function fillRunRow(tr, summary, source, on) {
  for (const td of tr.children) RUN_COLUMNS[td.dataset.col].fill?.(td, summary, source, on);
}

export function rowsFor(container, runId) {
  return container.querySelectorAll(`tr[data-run-id="${CSS.escape(runId)}"]`);
}
