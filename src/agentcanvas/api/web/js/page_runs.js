// #/ — start form, queue and runs; progress pushed over /ws is coalesced per row.

import { API, api, enc, latestGet } from "./api.js";
import { fillRows, h, option, panel, scroller } from "./dom.js";
import { eventSummary, isLive, POLL_MS } from "./live.js";
import { PAGE_SIZE, pagerBar } from "./pager.js";
import { DIFF_PREFIX, fillRunRow, rowsFor, runRow, runTableHead } from "./run_rows.js";
import { ACTIVE, runAction } from "./run_summary.js";
import { startForm } from "./start_form.js";

const ROW_FLUSH_MS = 250;
const LIST_REFRESH_MS = 1000;
const RUN_STATUSES = ["pending", "queued", "running", "completed", "failed", "cancelled", "aborted"];
const SEARCH_DEBOUNCE_MS = 300;
const LIST_COLUMNS = ["pick", "run", "status", "health", "graph", "workers", "progress", "success",
  "eta", "started", "actions"];

// The listed columns, plus one per config field that differs between runs of the same graph.
function listColumns(runs) {
  const keys = new Set(runs.flatMap((s) => Object.keys(s.config_diff ?? {})));
  const diff = [...keys].sort().map((k) => DIFF_PREFIX + k);
  const at = LIST_COLUMNS.indexOf("graph") + 1;
  return [...LIST_COLUMNS.slice(0, at), ...diff, ...LIST_COLUMNS.slice(at)];
}

// Text search on name/tags/note/id, a tag filter, and a status filter.
function runFilters(state, load) {
  const reload = () => { state.offset = 0; load(); };
  const status = h("select", { id: "runs-filter", "aria-label": "filter runs by status" },
    option("", "all statuses"), RUN_STATUSES.map((s) => option(s)));
  status.addEventListener("change", () => { state.status = status.value; reload(); });
  const search = h("input", { type: "search", id: "runs-search", placeholder: "search name, tag, note",
    "aria-label": "search runs by name, tag or note" });
  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { state.text = search.value.trim(); reload(); }, SEARCH_DEBOUNCE_MS);
  });
  const tag = h("select", { id: "runs-tag", "aria-label": "filter runs by tag" }, option("", "all tags"));
  tag.addEventListener("change", () => { state.tag = tag.value; reload(); });
  const setTags = (tags) => {
    const known = [...new Set([...tags, ...(state.tag ? [state.tag] : [])])].sort();
    if (JSON.stringify(known) === tag.dataset.known) return;
    tag.dataset.known = JSON.stringify(known);
    tag.replaceChildren(option("", "all tags"), ...known.map((t) => option(t)));
    tag.value = state.tag;
  };
  return { el: [search, tag, status], setTags };
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

function runsTable(ctx, on) {
  const get = latestGet(ctx);
  const state = { offset: 0, status: "", text: "", tag: "" };
  const { el, body, heading } = panel("Runs", "runs-panel");
  const thead = runTableHead(LIST_COLUMNS);
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; load(); });
  const filters = runFilters(state, () => load());
  const compare = h("button", { type: "button", id: "compare-picked", disabled: true,
    text: "Compare 2 picked" });
  compare.addEventListener("click", () => {
    location.hash = `#/compare?a=${enc(on.picked[0])}&b=${enc(on.picked[1])}`;
  });
  const table = h("table", { class: "runs", id: "runs-table" }, thead, tbody);
  body.append(h("div", { class: "toolbar" }, filters.el, compare, pager.el), scroller(table));
  async function load() {
    const query = new URLSearchParams({ offset: state.offset, limit: PAGE_SIZE });
    if (state.status) query.set("status", state.status);
    if (state.text) query.set("q", state.text);
    if (state.tag) query.set("tag", state.tag);
    const data = await get(`${API}/runs?${query}`);
    if (!data) return;
    data.runs.forEach((s) => on.remember(s));
    filters.setTags(data.tags ?? []);
    const columns = listColumns(data.runs);
    table.replaceChild(runTableHead(columns), table.tHead);
    const filtered = state.status || state.text || state.tag;
    fillRows(tbody, data.runs.map((s) => runRow(columns, s, on)), columns.length,
      filtered ? "No runs match." : "No runs yet — start one above.");
    pager.update(state.offset, data.runs.length, data.total);
    heading.textContent = `Runs (${data.total})`;
  }
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(tbody, err)), LIST_REFRESH_MS);
  return {
    el, load, refresh, compare,
    // A run not on this page appears by reloading page 1 when it would be listed there.
    wants: (summary) => state.offset === 0 && !state.text && !state.tag
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

export function runsView(ctx) {
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
  const runs = runsTable(ctx, on);
  const started = () => { queue.refresh(); runs.load().catch((err) => console.error(err)); };
  ctx.root.append(h("div", { class: "grid two" }, startForm(ctx, started), queue.el), runs.el);
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
