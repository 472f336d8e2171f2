// #/?q=&tag=&graph=&status=&offset= — start form, queue and runs; progress pushed over /ws is
// coalesced per row. The list's filters live in the URL: a link reproduces the view, and Back
// (a hashchange, so the router) restores the one before.

import { API, api, enc, latestGet } from "./api.js";
import { fillRows, h, option, panel, scroller } from "./dom.js";
import { eventSummary, isLive, POLL_MS } from "./live.js";
import { PAGE_SIZE, pagerBar } from "./pager.js";
import { ACTIVE } from "./run_facts.js";
import { DIFF_PREFIX, fillRunRow, rowsFor, runRow, runTableHead } from "./run_rows.js";
import { runAction } from "./run_summary.js";
import { startForm } from "./start_form.js";
import { isFiltered, runsApiQuery, runsFilters, runsHash } from "./url_state.js";

const ROW_FLUSH_MS = 250;
const LIST_REFRESH_MS = 1000;
const RUN_STATUSES = ["pending", "queued", "running", "completed", "failed", "cancelled", "aborted"];
const SEARCH_DEBOUNCE_MS = 300;
// Success (with its interval) right after the run, so that it shows on any screen; the config
// fields that differ between runs of a graph come after the graph, towards the end.
const LIST_COLUMNS = ["pick", "run", "success", "health", "status", "progress", "eta", "actions",
  "graph", "workers", "started"];

// The listed columns, plus one per config field that differs between runs of the same graph.
function listColumns(runs) {
  const keys = new Set(runs.flatMap((s) => Object.keys(s.config_diff ?? {})));
  const diff = [...keys].sort().map((k) => DIFF_PREFIX + k);
  const at = LIST_COLUMNS.indexOf("graph") + 1;
  return [...LIST_COLUMNS.slice(0, at), ...diff, ...LIST_COLUMNS.slice(at)];
}

// A select of `label` over `values`, "" for all; its known values refreshed by setValues
// (sorted, unless `ordered` says they come in their own order).
function filterSelect(id, label, all, value, ordered = false) {
  const select = h("select", { id, "aria-label": label }, option("", all));
  const setValues = (values) => {
    const known = [...new Set([...values, ...(value() ? [value()] : [])])];
    if (!ordered) known.sort();
    if (JSON.stringify(known) === select.dataset.known) return;
    select.dataset.known = JSON.stringify(known);
    select.replaceChildren(option("", all), ...known.map((v) => option(v)));
    select.value = value();
  };
  return { el: select, setValues };
}

// Text search on name/tags/note/id, filters by tag, graph and status: each change goes to
// the URL (a new history entry) and reloads the list from its first page.
function runFilters(ctx, state, load) {
  const change = (key, value) => {
    if (state[key] === value) return; // no history entry for the same view
    Object.assign(state, { [key]: value, offset: 0 });
    history.pushState(null, "", runsHash(state));
    load();
  };
  const search = h("input", { type: "search", id: "runs-search", placeholder: "search name, tag, note",
    "aria-label": "search runs by name, tag or note", value: state.text });
  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => change("text", search.value.trim()), SEARCH_DEBOUNCE_MS);
  });
  ctx.onDispose(() => clearTimeout(timer)); // no late search pushed onto another page
  const tag = filterSelect("runs-tag", "filter runs by tag", "all tags", () => state.tag);
  const graph = filterSelect("runs-graph", "filter runs by graph", "all graphs", () => state.graph);
  const status = filterSelect("runs-filter", "filter runs by status", "all statuses",
    () => state.status, true);
  status.setValues(RUN_STATUSES);
  for (const [key, select] of [["tag", tag], ["graph", graph], ["status", status]]) {
    select.el.addEventListener("change", () => change(key, select.el.value));
  }
  return {
    el: [search, tag.el, graph.el, status.el],
    setKnown: (data) => { tag.setValues(data.tags ?? []); graph.setValues(data.graphs ?? []); },
  };
}

function queuePanel(ctx, on) {
  const get = latestGet(ctx);
  const { el, body } = panel("Queue", "queue-panel");
  const runningColumns = ["run", "graph", "workers", "progress", "eta", "actions"];
  const queuedColumns = ["run", "graph", "workers", "priority", "waiting", "actions"];
  let known = new Map();
  let shown = "";
  const table = (id, columns, rows, empty) => {
    const tbody = h("tbody");
    fillRows(tbody, rows.map((s) => runRow(columns, s, on)), columns.length, empty);
    return scroller(h("table", { class: "runs compact", id }, runTableHead(columns), tbody));
  };
  const load = async () => {
    const data = await get(`${API}/queue`);
    // Rebuilt only when the queue changed: progress is updated in place, and a half-confirmed
    // "Cancel" must survive the fallback poll.
    if (!data || JSON.stringify(data) === shown) return;
    shown = JSON.stringify(data);
    known = new Map([...data.running.map((r) => [r.run_id, "running"]),
      ...data.queued.map((q) => [q.run_id, "queued"])]);
    const running = data.running.map((r) => ({ ...on.summaryOf(r.run_id), ...r, status: "running" }));
    const queued = data.queued.map((q) => ({ ...on.summaryOf(q.run_id), ...q, status: "queued" }));
    body.replaceChildren(
      h("h3", {}, `Running (${running.length})`),
      table("running-table", runningColumns, running, "Nothing running."),
      h("h3", {}, `Queued (${queued.length})`),
      table("queued-table", queuedColumns, queued, "Queue is empty."));
    running.filter((r) => !on.summaryOf(r.run_id)).forEach((r) => on.fetchSummary(r.run_id));
  };
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(body, err)), LIST_REFRESH_MS);
  // Whether the queue panel is stale for this status (a run started, finished or appeared).
  const stale = (runId, status) => {
    const listed = known.get(runId);
    if (!ACTIVE.has(status)) return listed !== undefined;
    return listed !== (status === "running" ? "running" : "queued");
  };
  return { el, refresh, stale };
}

function runsTable(ctx, on, query) {
  const get = latestGet(ctx);
  const state = runsFilters(query);
  const { el, body, heading } = panel("Runs", "runs-panel");
  const thead = runTableHead(LIST_COLUMNS);
  const tbody = h("tbody");
  const pager = pagerBar((offset) => {
    state.offset = offset;
    history.pushState(null, "", runsHash(state));
    load();
  });
  const filters = runFilters(ctx, state, () => load());
  const compare = h("button", { type: "button", id: "compare-picked", disabled: true,
    text: "Compare 2 picked" });
  compare.addEventListener("click", () => {
    location.hash = `#/compare?a=${enc(on.picked[0])}&b=${enc(on.picked[1])}`;
  });
  const table = h("table", { class: "runs", id: "runs-table" }, thead, tbody);
  body.append(h("div", { class: "toolbar" }, filters.el, compare, pager.el), scroller(table));
  async function load() {
    const data = await get(`${API}/runs?${runsApiQuery(state, PAGE_SIZE)}`);
    if (!data) return;
    data.runs.forEach((s) => on.remember(s));
    filters.setKnown(data);
    const columns = listColumns(data.runs);
    table.replaceChild(runTableHead(columns), table.tHead);
    fillRows(tbody, data.runs.map((s) => runRow(columns, s, on)), columns.length,
      isFiltered(state) ? "No runs match." : "No runs yet — start one above.");
    pager.update(state.offset, data.runs.length, data.total);
    heading.textContent = `Runs (${data.total})`;
  }
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(tbody, err)), LIST_REFRESH_MS);
  return {
    el, load, refresh, compare,
    // A run not on this page appears by reloading page 1 when it would be listed there.
    wants: (summary) => state.offset === 0 && !state.text && !state.tag
      && (!state.graph || state.graph === summary.graph_name)
      && (!state.status || state.status === summary.status),
  };
}

// Coalesces per-run summaries (WebSocket bursts) and applies each run's latest at most every
// ROW_FLUSH_MS, so a busy run costs one row update per flush, not one per event.
function coalescer(ctx, apply) {
  const pending = new Map();
  const flush = ctx.throttle(() => {
    for (const [id, [summary, source]] of pending) apply(id, summary, source);
    pending.clear();
  }, ROW_FLUSH_MS);
  return {
    push(id, summary, source) {
      pending.set(id, [summary, source]);
      flush();
    },
    latest: (id) => pending.get(id)?.[0],
  };
}

function summaryFromEvent(message, previous) {
  const summary = eventSummary(message, previous);
  if (message.type !== "eval_complete") return summary;
  return { ...(summary ?? previous), run_id: message.run_id, status: message.status };
}

export function runsView(ctx, query = new URLSearchParams()) {
  const summaries = new Map();
  const on = {
    picked: [],
    isPicked: (id) => on.picked.includes(id),
    summaryOf: (id) => summaries.get(id),
    remember: (s) => summaries.set(s.run_id, s),
    action: async (kind, id, button) => { await runAction(kind, id, button); queue.refresh(); },
    pick: (event) => {
      const id = event.target.value;
      on.picked = on.picked.filter((p) => p !== id).concat(event.target.checked ? [id] : []).slice(-2);
      ctx.root.querySelectorAll("input.pick").forEach((box) => { box.checked = on.isPicked(box.value); });
      runs.compare.disabled = on.picked.length !== 2;
    },
    fetchSummary: (id) => api(`${API}/status/${enc(id)}?compact=true`)
      .then((s) => updates.push(id, s, "poll")).catch(() => {}),
  };
  const queue = queuePanel(ctx, on);
  const runs = runsTable(ctx, on, query);
  const started = () => { queue.refresh(); runs.load().catch((err) => console.error(err)); };
  // A phone shows the runs first (CSS order), the queue and the start form after them.
  ctx.root.append(h("div", { class: "runs-page" },
    h("div", { class: "grid two start-and-queue" }, startForm(ctx, started), queue.el), runs.el));
  const updates = coalescer(ctx, (id, summary, source) => {
    summaries.set(id, summary);
    rowsFor(ctx.root, id).forEach((tr) => fillRunRow(tr, summary, source, on));
    if (!rowsFor(runs.el, id).length && runs.wants(summary)) runs.refresh();
    if (queue.stale(id, summary.status)) queue.refresh();
  });
  ctx.listen((message) => {
    if (message.type === "live_open" && message.reconnect) started();
    if (message.source !== "eval" || !message.run_id) return;
    const id = message.run_id;
    const summary = summaryFromEvent(message, updates.latest(id) ?? summaries.get(id));
    if (message.type === "eval_complete") on.fetchSummary(id);
    if (summary) updates.push(id, summary, "ws");
  });
  ctx.every(POLL_MS, () => {
    queue.refresh();
    if (!isLive()) runs.refresh();
  });
  started();
}
