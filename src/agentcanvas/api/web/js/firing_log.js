// An episode's firing log (one record per node firing) and its per-node statistics.

import {
  dataTable, fillRows, h, headRow, num, option, rowHead, scroller, statusBadge,
} from "./dom.js";
import { fmtNum, isNum, truncate } from "./format.js";
import { pagerBar } from "./pager.js";

const LOG_PAGE_SIZE = 100;

const SHAPE_RE = /^[a-z]+\d*\[[\d,]*\]$/;

function brief(value) {
  if (typeof value === "string") {
    return SHAPE_RE.test(value) ? value : JSON.stringify(truncate(value, 40));
  }
  const text = JSON.stringify(value);
  return text === undefined ? "–" : truncate(text, 60);
}

function summarize(value, max = 140) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const entries = Object.entries(value);
    if (!entries.length) return "–";
    return truncate(entries.map(([k, v]) => `${k}=${brief(v)}`).join(", "), max);
  }
  return truncate(brief(value), max);
}

export function nodeStats(records) {
  const stats = new Map();
  for (const r of records) {
    const s = stats.get(r.node) ?? { node: r.node, type: r.type, firings: 0, total: 0, max: 0, errors: 0 };
    const latency = isNum(r.latency_ms) ? r.latency_ms : 0;
    s.firings += 1;
    s.total += latency;
    s.max = Math.max(s.max, latency);
    s.errors += r.status && r.status !== "ok" ? 1 : 0;
    stats.set(r.node, s);
  }
  return dataTable("node-stats", ["Node", "Type", "Firings", "Mean ms", "Max ms", "Errors"],
    [...stats.values()].map((s) => h("tr", {}, rowHead(s.node), h("td", {}, s.type), num(s.firings),
      num(fmtNum(s.total / s.firings, 2)), num(fmtNum(s.max, 2)), num(s.errors))), [2, 3, 4, 5]);
}

function logRow(r, onStep) {
  const ok = !r.status || r.status === "ok";
  const stepButton = h("button", { type: "button", class: "link", text: r.step,
    title: "show this step's frame", onclick: () => onStep(r.step) });
  const io = (value, text) => h("td", { class: "io", title: JSON.stringify(value ?? {}) }, text);
  return h("tr", { dataset: { step: r.step }, class: ok ? undefined : "bad" },
    num(stepButton), h("td", {}, r.node), h("td", { class: "muted" }, r.type ?? ""),
    h("td", {}, ok ? "ok" : statusBadge(r.status)), num(fmtNum(r.latency_ms, 2)),
    io(r.inputs, summarize(r.inputs)), io(r.error ?? r.outputs, r.error || summarize(r.outputs)));
}

// The per-node firing log, paginated on the client; follows the player's current step.
export function firingLog(records, onStep) {
  const state = { offset: 0, node: "", current: null };
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; draw(); }, LOG_PAGE_SIZE);
  const filter = h("select", { "aria-label": "filter by node" }, option("", "all nodes"),
    [...new Set(records.map((r) => r.node))].map((n) => option(n)));
  filter.addEventListener("change", () => { state.node = filter.value; state.offset = 0; draw(); });
  const visible = () => (state.node ? records.filter((r) => r.node === state.node) : records);
  function draw() {
    const list = visible();
    const page = list.slice(state.offset, state.offset + LOG_PAGE_SIZE);
    fillRows(tbody, page.map((r) => logRow(r, onStep)), 7, "No firing records.");
    pager.update(state.offset, page.length, list.length);
    highlight(state.current);
  }
  function highlight(step) {
    state.current = step;
    for (const tr of tbody.children) tr.classList.toggle("current", Number(tr.dataset.step) === step);
  }
  function follow(step) {
    const at = visible().findIndex((r) => r.step === step);
    const offset = at < 0 ? state.offset : Math.floor(at / LOG_PAGE_SIZE) * LOG_PAGE_SIZE;
    if (offset !== state.offset) {
      state.offset = offset;
      draw();
    }
    highlight(step);
  }
  const table = h("table", { class: "data", id: "log-table" },
    headRow(["Step", "Node", "Type", "Status", "Latency ms", "Inputs", "Outputs"], [0, 4]), tbody);
  draw();
  const el = h("div", {}, h("div", { class: "toolbar" }, filter, pager.el), scroller(table));
  return { el, follow };
}
