// AgentCanvas batch-eval dashboard: a single-page app on hash routes; no framework, no build.
//
//   #/                          runs and queue (progress pushed over /ws), start form
//   #/run/<id>                  one run: config, graph, aggregates, per task, episodes
//   #/run/<id>/episode/<idx>    one episode: frame player, firing log, episode.json
//   #/compare?a=<id>&b=<id>     two runs paired by (task, episode_index)
//
// Server data is only ever written with textContent / setAttribute, never as HTML.
// Large lists are paginated on the server (runs, episodes); WebSocket events are coalesced
// and applied to the affected rows in place, at most every ROW_FLUSH_MS.

const API = "/api/eval/v2";
const PAGE_SIZE = 50;
const LOG_PAGE_SIZE = 100;
const ROW_FLUSH_MS = 250;
const RUN_FLUSH_MS = 500;
const EPISODES_REFRESH_MS = 2000;
const LIST_REFRESH_MS = 1000;
const POLL_MS = 5000; // fallback only; progress is pushed over the WebSocket
const PLAY_FRAME_MS = 250;
const CONFIRM_MS = 3000;
const ACTIVE = new Set(["pending", "queued", "running"]);
const RESUMABLE = new Set(["aborted", "cancelled", "failed"]);
const RUN_STATUSES = ["pending", "queued", "running", "completed", "failed", "cancelled", "aborted"];
const EPISODE_STATUSES = ["completed", "timeout", "exception", "error", "no_verdict", "cancelled"];
const TOKEN = new URLSearchParams(location.search).get("token");

// ---------------------------------------------------------------------------------------
// DOM and formatting helpers

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  el.append(...nodes(children));
  return el;
}

function nodes(children) {
  return children.flat(Infinity)
    .filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

// replaceChildren that skips null / false (optional parts of a view).
function put(el, ...children) {
  el.replaceChildren(...nodes(children));
}

function setProps(el, props) {
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (typeof value !== "string" && key in el) el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
}

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) el.setAttribute(key, value);
  }
  el.append(...nodes(children));
  return el;
}

function panel(title, id) {
  const body = h("div", { class: "panel-body" });
  const heading = h("h2", {}, title);
  return { el: h("section", { class: "panel", id }, heading, body), body, heading };
}

function notice(text, kind = "info") {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : undefined }, text);
}

function keyValues(entries) {
  return h("table", { class: "kv" }, h("tbody", {}, entries.map(([k, v]) =>
    h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v)))));
}

function emptyRow(colspan, text) {
  return h("tr", { class: "empty" }, h("td", { colspan }, text));
}

const option = (value, text = value) => h("option", { value, text });
const num = (content) => h("td", { class: "num" }, content);
const rowHead = (content) => h("th", { scope: "row" }, content);

// `numeric` lists the column indices whose headers align right, over right-aligned numbers.
function headRow(labels, numeric = []) {
  return h("thead", {}, h("tr", {}, labels.map((label, i) =>
    h("th", { scope: "col", class: numeric.includes(i) ? "num" : undefined }, label))));
}

function dataTable(id, labels, rows, numeric = []) {
  return h("table", { class: "data", id }, headRow(labels, numeric), h("tbody", {}, rows));
}

function scroller(...children) {
  return h("div", { class: "table-wrap" }, children);
}

function fillRows(tbody, rows, width, emptyText) {
  tbody.replaceChildren(...(rows.length ? rows : [emptyRow(width, emptyText)]));
}

function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

function fmtNum(x, digits = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "boolean") return x ? "1" : "0";
  if (typeof x !== "number") return String(x);
  if (!Number.isFinite(x)) return "–";
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

function fmtPct(x) {
  return isNum(x) ? `${(100 * x).toFixed(1)} %` : "–";
}

function fmtInterval(lo, hi, fmt = fmtNum) {
  return isNum(lo) && isNum(hi) ? `[${fmt(lo)}, ${fmt(hi)}]` : "–";
}

function fmtDuration(seconds) {
  if (!isNum(seconds) || seconds < 0) return "–";
  if (seconds < 10) return `${seconds.toFixed(seconds < 1 ? 2 : 1)} s`;
  const whole = Math.round(seconds);
  if (whole < 60) return `${whole} s`;
  const m = Math.floor(whole / 60);
  if (m < 60) return `${m} min ${String(whole % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

function fmtTime(epochS) {
  return isNum(epochS) ? new Date(epochS * 1000).toLocaleString() : "–";
}

function truncate(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function statusBadge(status) {
  return h("span", { class: `badge st-${status || "unknown"}`, text: status || "unknown" });
}

function clamp(x, lo, hi) {
  return Math.min(hi, Math.max(lo, x));
}

// ---------------------------------------------------------------------------------------
// HTTP

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && typeof body === "object" ? body.detail : body;
    super(`${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.status = status;
    this.body = body;
  }
}

function withToken(url) {
  if (!TOKEN) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(TOKEN)}`;
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(withToken(path), init);
  const text = await response.text();
  const data = text ? parseJson(text) ?? text : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// A GET whose calls supersede each other: an answer that arrives after a newer call (say, a
// click on "next" then on "sort") is dropped, and so is one for a view already left.
function latestGet(ctx) {
  let ticket = 0;
  return async (path) => {
    const mine = ++ticket;
    const data = await api(path);
    return ctx.alive && mine === ticket ? data : null;
  };
}

const enc = encodeURIComponent;
const runHref = (id) => `#/run/${enc(id)}`;
const episodeHref = (id, index) => `#/run/${enc(id)}/episode/${index}`;
const runApi = (id) => `${API}/runs/${enc(id)}`;

// ---------------------------------------------------------------------------------------
// Live events over the WebSocket (reconnects with backoff)

const live = { socket: null, handlers: new Set(), retryMs: 500, opens: 0 };

function connectLive() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(withToken(`${scheme}//${location.host}/ws`));
  live.socket = socket;
  socket.onopen = () => {
    live.retryMs = 500;
    live.opens += 1;
    setLiveState("live");
    dispatch({ type: "live_open", reconnect: live.opens > 1 });
  };
  socket.onmessage = (event) => {
    const message = parseJson(event.data);
    if (message) dispatch(message);
  };
  socket.onclose = () => {
    setLiveState("offline");
    setTimeout(connectLive, live.retryMs);
    live.retryMs = Math.min(live.retryMs * 2, 10000);
  };
}

function isLive() {
  return live.socket?.readyState === WebSocket.OPEN;
}

function dispatch(message) {
  for (const handler of live.handlers) {
    try {
      handler(message);
    } catch (err) {
      console.error("live handler failed", err);
    }
  }
}

function setLiveState(state) {
  const el = document.getElementById("live-status");
  el.dataset.state = state;
  el.textContent = state === "live" ? "● live" : "○ offline · polling";
}

// The latest compact summary an event carries (subprocess relay: `summary`; in-process: fields).
function eventSummary(message, previous) {
  if (message.summary) return message.summary;
  if (message.type !== "eval_progress") return null;
  const merged = { ...(previous || {}), run_id: message.run_id, status: "running" };
  for (const key of ["episodes_done", "episodes_total", "success_rate"]) {
    if (key in message) merged[key] = message[key];
  }
  return merged;
}

// ---------------------------------------------------------------------------------------
// Views own their timers and subscriptions; route() disposes the old view.

function throttle(fn, ms) {
  let timer = null;
  let queued = false;
  const run = () => {
    if (timer !== null) {
      queued = true;
      return;
    }
    fn();
    timer = setTimeout(() => {
      timer = null;
      if (queued) {
        queued = false;
        run();
      }
    }, ms);
  };
  run.cancel = () => {
    clearTimeout(timer);
    timer = null;
    queued = false;
  };
  return run;
}

function viewContext(root) {
  const disposers = [];
  return {
    root,
    alive: true,
    onDispose(fn) { disposers.push(fn); },
    every(ms, fn) {
      const id = setInterval(fn, ms);
      disposers.push(() => clearInterval(id));
    },
    listen(fn) {
      live.handlers.add(fn);
      disposers.push(() => live.handlers.delete(fn));
    },
    throttle(fn, ms) {
      const run = throttle(fn, ms);
      disposers.push(run.cancel);
      return run;
    },
    fail(container, err) {
      if (!this.alive) return;
      console.error(err);
      container.replaceChildren(notice(err.message || String(err), "error"));
    },
    dispose() {
      this.alive = false;
      disposers.splice(0).forEach((fn) => fn());
    },
  };
}

// ---------------------------------------------------------------------------------------
// Shared widgets: progress box, pager, run rows, charts

function progressBox() {
  return h("div", { class: "progress" },
    h("progress", { max: 1, value: 0 }), h("span", { class: "progress-text" }));
}

// Episodes recorded as cancelled (a cancelled run's remainder) do not count as done.
function setProgress(box, summary, source) {
  const bar = box.querySelector("progress");
  const total = summary.episodes_total || 0;
  const cancelled = summary.status_counts?.cancelled ?? 0;
  const done = (summary.episodes_done || 0) - cancelled;
  bar.max = Math.max(total, 1);
  bar.value = Math.min(done, bar.max);
  const text = total ? `${done}/${total}${cancelled ? ` · ${cancelled} cancelled` : ""}` : "–";
  box.querySelector(".progress-text").textContent = text;
  box.dataset.status = summary.status || "";
  if (source) box.dataset.source = source;
}

function successRate(summary) {
  const agg = summary.aggregate_metrics?.success;
  return isNum(agg?.mean) ? agg.mean : summary.success_rate;
}

function successText(summary) {
  const agg = summary.aggregate_metrics?.success;
  const rate = successRate(summary);
  if (!isNum(rate)) return "–";
  return agg && isNum(agg.lo) ? `${fmtPct(rate)} (n=${agg.n})` : fmtPct(rate);
}

function etaText(summary) {
  const started = summary.timings?.started_at;
  const finished = summary.timings?.finished_at;
  if (summary.status === "queued" || summary.status === "pending") return "waiting";
  if (summary.status !== "running") {
    return isNum(started) && isNum(finished) ? `took ${fmtDuration(finished - started)}` : "";
  }
  const done = summary.episodes_done || 0;
  const left = (summary.episodes_total || 0) - done;
  const elapsed = Date.now() / 1000 - started;
  if (!done || !isNum(started) || elapsed <= 0) return "…";
  return `${fmtDuration(left / (done / elapsed))} left`;
}

function pagerBar(onOffset, pageSize = PAGE_SIZE) {
  const state = { offset: 0, total: 0 };
  const go = (offset) => onOffset(clamp(offset, 0, Math.max(0, lastOffset())));
  const lastOffset = () => Math.floor((state.total - 1) / pageSize) * pageSize;
  const button = (text, label, fn) => h("button", { type: "button", text, "aria-label": label, onclick: fn });
  const first = button("«", "first page", () => go(0));
  const prev = button("‹ Prev", "previous page", () => go(state.offset - pageSize));
  const next = button("Next ›", "next page", () => go(state.offset + pageSize));
  const last = button("»", "last page", () => go(lastOffset()));
  const info = h("span", { class: "pager-info" });
  return {
    el: h("div", { class: "pager" }, first, prev, info, next, last),
    update(offset, count, total) {
      Object.assign(state, { offset, total });
      const page = Math.floor(offset / pageSize) + 1;
      const pages = Math.max(1, Math.ceil(total / pageSize));
      info.textContent = total
        ? `${offset + 1}–${offset + count} of ${total} · page ${page}/${pages}` : "none";
      first.disabled = prev.disabled = offset <= 0;
      next.disabled = last.disabled = offset + count >= total;
    },
  };
}

function confirmButton(text, confirmText, action) {
  const button = h("button", { type: "button", text });
  button.addEventListener("click", async () => {
    if (button.dataset.armed !== "1") {
      button.dataset.armed = "1";
      button.textContent = confirmText;
      setTimeout(() => {
        if (button.dataset.armed !== "1") return;
        button.dataset.armed = "";
        button.textContent = text;
      }, CONFIRM_MS);
      return;
    }
    button.dataset.armed = "done";
    button.disabled = true;
    await action(button);
  });
  return button;
}

function runActions(summary, onAction) {
  const buttons = [];
  if (ACTIVE.has(summary.status)) {
    buttons.push(confirmButton("Cancel", "Really cancel?", (b) => onAction("cancel", summary.run_id, b)));
  }
  if (RESUMABLE.has(summary.status)) {
    const resume = h("button", { type: "button", text: "Resume" });
    resume.addEventListener("click", () => {
      resume.disabled = true;
      onAction("resume", summary.run_id, resume);
    });
    buttons.push(resume);
  }
  return buttons.map((b) => Object.assign(b, { className: `action ${b.textContent.toLowerCase()}` }));
}

async function runAction(kind, runId, button) {
  try {
    await api(`${API}/${kind}/${enc(runId)}`, { method: "POST" });
    button.textContent = kind === "cancel" ? "Cancelling…" : "Queued";
  } catch (err) {
    button.disabled = false;
    button.title = err.message;
    button.textContent = "Failed";
  }
}

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

function runTableHead(columns) {
  return h("thead", {}, h("tr", {}, columns.map((name) =>
    h("th", { scope: "col", class: RUN_COLUMNS[name].num ? "num" : undefined }, RUN_COLUMNS[name].head))));
}

function runRow(columns, summary, on) {
  const tr = h("tr", { dataset: { runId: summary.run_id } });
  for (const name of columns) {
    const column = RUN_COLUMNS[name];
    tr.append(h("td", { "data-col": name, class: column.num ? "num" : undefined },
      column.build ? column.build(summary, on) : null));
  }
  fillRunRow(tr, summary, "load", on);
  return tr;
}

function fillRunRow(tr, summary, source, on) {
  for (const td of tr.children) RUN_COLUMNS[td.dataset.col].fill?.(td, summary, source, on);
}

function rowsFor(container, runId) {
  return container.querySelectorAll(`tr[data-run-id="${CSS.escape(runId)}"]`);
}

// A horizontal bar per row with a whisker for its interval: [{label, mean, lo, hi, note}].
function intervalChart(rows, { domain, label, format = fmtNum, base = 0 }) {
  const W = 680, LABEL_W = 210, VALUE_W = 150, ROW_H = 26, TOP = 6;
  const plotW = W - LABEL_W - VALUE_W;
  const [min, max] = domain;
  const x = (v) => LABEL_W + ((clamp(v, min, max) - min) / (max - min || 1)) * plotW;
  const height = TOP + rows.length * ROW_H + 24;
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${height}`, width: W,
    role: "img", "aria-label": label });
  const bottom = TOP + rows.length * ROW_H;
  chart.append(svg("line", { class: "axis", x1: x(base), x2: x(base), y1: TOP, y2: bottom }));
  for (const tick of [min, base, max].filter((t, i, all) => all.indexOf(t) === i)) {
    chart.append(svg("text", { class: "tick", x: x(tick), y: bottom + 16, "text-anchor": "middle" },
      format(tick)));
  }
  rows.forEach((row, i) => chart.append(chartRow(row, TOP + i * ROW_H, ROW_H, x, base, format)));
  return chart;
}

function chartRow(row, y, rowH, x, base, format) {
  const group = svg("g", { class: "chart-row" });
  const mid = y + rowH / 2;
  const value = `${format(row.mean)} ${fmtInterval(row.lo, row.hi, format)}`;
  group.append(svg("title", {}, `${row.label}: ${value}${row.note ? ` · ${row.note}` : ""}`));
  group.append(svg("text", { class: "label", x: 202, y: mid + 4, "text-anchor": "end" },
    truncate(row.label, 30)));
  if (isNum(row.mean)) {
    const x0 = x(base), x1 = x(row.mean);
    group.append(svg("rect", { class: row.mean < base ? "bar neg" : "bar", x: Math.min(x0, x1),
      y: y + 5, width: Math.max(1, Math.abs(x1 - x0)), height: rowH - 10 }));
  }
  if (isNum(row.lo) && isNum(row.hi)) {
    const [a, b] = [x(row.lo), x(row.hi)];
    group.append(svg("path", { class: "whisker",
      d: `M${a},${mid} H${b} M${a},${mid - 6} V${mid + 6} M${b},${mid - 6} V${mid + 6}` }));
  }
  group.append(svg("text", { class: "value", x: 540, y: mid + 4 }, value));
  return group;
}

function chartDomain(rows) {
  const values = rows.flatMap((r) => [r.mean, r.lo, r.hi]).filter(isNum);
  if (values.every((v) => v >= 0 && v <= 1)) return [0, 1];
  const lo = Math.min(0, ...values), hi = Math.max(0, ...values);
  return lo === hi ? [lo, lo + 1] : [lo, hi];
}

// ---------------------------------------------------------------------------------------
// The frozen graph as a node diagram: columns by longest path over same-step edges;
// next_iteration edges (to the next step) are drawn dashed, routed below the nodes.

const NODE_W = 190, HEAD_H = 40, PORT_H = 16, GAP_X = 90, GAP_Y = 30, PAD = 26;
const LEFT = 80; // room left of the first column for next_iteration edges coming back in

function portRef(ref) {
  if (typeof ref === "string") {
    const dot = ref.indexOf(".");
    return { node: ref.slice(0, dot), port: ref.slice(dot + 1) };
  }
  return { node: ref?.node, port: ref?.port };
}

function graphPorts(nodeList, edges) {
  const ports = new Map(nodeList.map((n) => [n.id, { ins: [], outs: [] }]));
  const add = (list, port) => { if (!list.includes(port)) list.push(port); };
  for (const e of edges) {
    if (ports.has(e.from.node)) add(ports.get(e.from.node).outs, e.from.port);
    if (ports.has(e.to.node)) add(ports.get(e.to.node).ins, e.to.port);
  }
  return ports;
}

function graphLayers(nodeList, edges) {
  const layer = new Map(nodeList.map((n) => [n.id, 0]));
  const forward = edges.filter((e) => !e.next && e.from.node !== e.to.node
    && layer.has(e.from.node) && layer.has(e.to.node));
  for (let round = 0; round < nodeList.length; round++) {
    let changed = false;
    for (const e of forward) {
      const want = layer.get(e.from.node) + 1;
      if (want > layer.get(e.to.node) && want < nodeList.length) {
        layer.set(e.to.node, want);
        changed = true;
      }
    }
    if (!changed) break;
  }
  return layer;
}

function placeNodes(nodeList, layers, ports) {
  const columns = new Map();
  nodeList.forEach((n, order) => {
    const c = layers.get(n.id);
    if (!columns.has(c)) columns.set(c, []);
    columns.get(c).push({ n, order });
  });
  const boxes = new Map();
  for (const [c, list] of columns) {
    list.sort((a, b) => String(a.n.scope).localeCompare(String(b.n.scope)) || a.order - b.order);
    let y = PAD + 18;
    for (const { n } of list) {
      const p = ports.get(n.id);
      const height = HEAD_H + Math.max(p.ins.length, p.outs.length, 1) * PORT_H + 8;
      boxes.set(n.id, { x: LEFT + c * (NODE_W + GAP_X), y, w: NODE_W, h: height });
      y += height + GAP_Y;
    }
  }
  return boxes;
}

function portPoint(boxes, ports, ref, side) {
  const box = boxes.get(ref.node);
  const i = Math.max(0, ports.get(ref.node)[side].indexOf(ref.port));
  return { x: side === "outs" ? box.x + box.w : box.x, y: box.y + HEAD_H + i * PORT_H + PORT_H / 2 };
}

function edgePath(edge, layout, lane) {
  const a = portPoint(layout.boxes, layout.ports, edge.from, "outs");
  const b = portPoint(layout.boxes, layout.ports, edge.to, "ins");
  if (!edge.next && b.x > a.x) {
    const dx = Math.max(30, (b.x - a.x) / 2);
    return `M${a.x},${a.y} C${a.x + dx},${a.y} ${b.x - dx},${b.y} ${b.x},${b.y}`;
  }
  const y = layout.bottom + 18 + lane * 14;
  return `M${a.x},${a.y} C${a.x + 60},${a.y} ${a.x + 60},${y} ${a.x},${y} `
    + `L${b.x},${y} C${b.x - 60},${y} ${b.x - 60},${b.y} ${b.x},${b.y}`;
}

function nodeBox(node, box, ports, envNodeset) {
  const kind = String(node.type).startsWith(`${envNodeset}.`) ? "env"
    : String(node.type).startsWith("core.") ? "core" : "model";
  const group = svg("g", { class: `node ${kind}`, "data-node": node.id });
  group.append(svg("title", {}, `${node.id} (${node.type})${node.scope ? ` · scope ${node.scope}` : ""}`));
  group.append(svg("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 7 }));
  group.append(svg("text", { class: "node-id", x: box.x + 10, y: box.y + 17 }, truncate(node.id, 22)));
  group.append(svg("text", { class: "node-type", x: box.x + 10, y: box.y + 32 }, truncate(node.type, 28)));
  const p = ports.get(node.id);
  const rowY = (i) => box.y + HEAD_H + i * PORT_H;
  p.ins.forEach((port, i) => group.append(portMark(box.x, rowY(i), port, "in")));
  p.outs.forEach((port, i) => group.append(portMark(box.x + box.w, rowY(i), port, "out")));
  return group;
}

function portMark(x, y, port, side) {
  const mid = y + PORT_H / 2;
  const label = side === "in" ? { x: x + 8, "text-anchor": "start" } : { x: x - 8, "text-anchor": "end" };
  return svg("g", { class: `port ${side}` },
    svg("circle", { cx: x, cy: mid, r: 3.5 }),
    svg("text", { ...label, y: mid + 4 }, truncate(port, 18)));
}

function scopeFrames(graph, nodeList, boxes) {
  return (graph.scopes ?? []).flatMap((scope) => {
    const inside = nodeList.filter((n) => n.scope === scope.id).map((n) => boxes.get(n.id));
    if (!inside.length) return [];
    const x = Math.min(...inside.map((b) => b.x)) - 10;
    const y = Math.min(...inside.map((b) => b.y)) - 22;
    const w = Math.max(...inside.map((b) => b.x + b.w)) + 10 - x;
    const hgt = Math.max(...inside.map((b) => b.y + b.h)) + 10 - y;
    return [svg("g", { class: "scope" },
      svg("rect", { x, y, width: w, height: hgt, rx: 10 }),
      svg("text", { x: x + 8, y: y + 14 }, scope.label || scope.id))];
  });
}

function arrowMarker() {
  return svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
  svg("path", { d: "M0,0 L10,5 L0,10 z" })));
}

function graphDiagram(graph) {
  const nodeList = graph.nodes ?? [];
  const edges = (graph.edges ?? []).map((e) => ({
    from: portRef(e.source), to: portRef(e.target), next: Boolean(e.next_iteration),
  })).filter((e) => nodeList.some((n) => n.id === e.from.node) && nodeList.some((n) => n.id === e.to.node));
  const ports = graphPorts(nodeList, edges);
  const boxes = placeNodes(nodeList, graphLayers(nodeList, edges), ports);
  const all = [...boxes.values()];
  const bottom = Math.max(PAD, ...all.map((b) => b.y + b.h));
  const layout = { boxes, ports, bottom };
  const backEdges = edges.filter((e) => e.next || boxes.get(e.to.node).x <= boxes.get(e.from.node).x);
  const width = Math.max(...all.map((b) => b.x + b.w), 200) + LEFT;
  const height = bottom + 30 + backEdges.length * 14;
  const label = `graph ${graph.name ?? ""}: ${nodeList.length} nodes, ${edges.length} edges`;
  const diagram = svg("svg", { class: "graph", viewBox: `0 0 ${width} ${height}`, width,
    role: "img", "aria-label": label });
  diagram.append(arrowMarker(), ...scopeFrames(graph, nodeList, boxes));
  edges.forEach((edge) => {
    const lane = backEdges.indexOf(edge);
    const title = `${edge.from.node}.${edge.from.port} → ${edge.to.node}.${edge.to.port}`
      + (edge.next ? " (next iteration)" : "");
    diagram.append(svg("path", { class: edge.next ? "edge next" : "edge",
      d: edgePath(edge, layout, lane), "marker-end": "url(#arrow)" }, svg("title", {}, title)));
  });
  nodeList.forEach((n) => diagram.append(nodeBox(n, boxes.get(n.id), ports, graph.env?.nodeset)));
  return diagram;
}

// ---------------------------------------------------------------------------------------
// #/ — start form, queue, runs

const FORM_FIELDS = [
  { name: "graph_name", label: "Graph", kind: "select" },
  { name: "episode_count", label: "Episodes per task", kind: "int", value: "10", min: 1 },
  { name: "worker_count", label: "Workers", kind: "int", value: "1", min: 1 },
  { name: "step_budget", label: "Step budget", kind: "int", optional: true, min: 1,
    placeholder: "graph default" },
  { name: "seed", label: "Seed", kind: "int", value: "0", min: 0 },
  { name: "tasks", label: "Tasks", kind: "text", optional: true,
    placeholder: "graph's tasks (comma-separated)" },
  { name: "save_frames", label: "Save frames", kind: "bool" },
];

function formField(field) {
  const id = `f-${field.name}`;
  const error = h("small", { class: "field-error", id: `${id}-error`, "data-error-for": field.name });
  const described = { id, name: field.name, "aria-describedby": error.id };
  if (field.kind === "bool") {
    const box = h("input", { ...described, type: "checkbox" });
    return h("label", { class: "field check" }, box, field.label, error);
  }
  const input = field.kind === "select"
    ? h("select", described, option("", "loading…"))
    : h("input", { ...described, type: field.kind === "int" ? "number" : "text", value: field.value,
      placeholder: field.placeholder, inputmode: field.kind === "int" ? "numeric" : undefined });
  return h("label", { class: "field", for: id }, h("span", {}, field.label), input, error);
}

// Client-side checks cover syntax only; limits (e.g. workers ≤ 64) come from the server's 422.
function checkField(field, raw) {
  const text = String(raw ?? "").trim();
  if (field.kind === "select" && !text) return "pick a graph";
  if (field.kind === "int") {
    if (!text) return field.optional ? null : "required";
    if (!/^-?\d+$/.test(text)) return "must be a whole number";
    if (Number(text) < field.min) return `must be at least ${field.min}`;
  }
  if (field.name === "tasks" && text && text.split(",").some((t) => !t.trim())) {
    return "comma-separated task ids, none empty";
  }
  return null;
}

function formBody(form) {
  const value = (name) => form.elements[name].value.trim();
  const body = {
    graph_name: value("graph_name"),
    episode_count: Number(value("episode_count")),
    worker_count: Number(value("worker_count")),
    seed: Number(value("seed")),
    save_frames: form.elements.save_frames.checked,
  };
  if (value("step_budget")) body.step_budget = Number(value("step_budget"));
  if (value("tasks")) body.tasks = value("tasks").split(",").map((t) => t.trim());
  return body;
}

function setFieldError(form, name, message) {
  const slot = form.querySelector(`[data-error-for="${name}"]`);
  if (!slot) return false;
  slot.textContent = message || "";
  form.elements[name]?.setAttribute("aria-invalid", message ? "true" : "false");
  return true;
}

function showServerErrors(form, err, message) {
  const problems = err.body?.problems ?? [];
  const unplaced = problems.filter((p) => !setFieldError(form, String(p.field).split(".")[0], p.message));
  const detail = typeof err.body?.detail === "string" ? err.body.detail : "";
  const prefixed = /^(\w+): (.+)$/s.exec(detail);
  if (!problems.length && prefixed && setFieldError(form, prefixed[1], prefixed[2])) return;
  if (!problems.length || unplaced.length) {
    const text = unplaced.length ? unplaced.map((p) => `${p.field}: ${p.message}`).join("; ") : err.message;
    message.replaceChildren(notice(text, "error"));
  }
}

async function loadGraphs(select) {
  const data = await api("/api/graphs");
  select.replaceChildren(...data.graphs.map((g) =>
    option(g.name, g.origin === "builtin" ? g.name : `${g.name} (${g.origin})`)));
  if (!data.graphs.length) select.append(option("", "no graphs"));
}

function startForm(ctx, onStarted) {
  const message = h("div", { class: "form-message", id: "start-message" });
  const submit = h("button", { type: "submit", class: "primary", text: "Queue run" });
  const form = h("form", { id: "start-form", novalidate: true },
    h("div", { class: "fields" }, FORM_FIELDS.map(formField)),
    h("div", { class: "form-actions" }, submit, message));
  const { el, body } = panel("Start a run", "start-panel");
  body.append(form);
  loadGraphs(form.elements.graph_name).catch((err) => ctx.fail(message, err));
  form.addEventListener("input", (event) => setFieldError(form, event.target.name, ""));
  form.addEventListener("change", (event) => {
    const field = FORM_FIELDS.find((f) => f.name === event.target.name);
    if (field && field.kind !== "bool") {
      setFieldError(form, field.name, checkField(field, event.target.value));
    }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    message.replaceChildren();
    const problems = FORM_FIELDS.filter((f) => f.kind !== "bool")
      .map((f) => [f.name, checkField(f, form.elements[f.name].value)]);
    problems.forEach(([name, problem]) => setFieldError(form, name, problem));
    const firstBad = problems.find(([, problem]) => problem);
    if (firstBad) {
      form.elements[firstBad[0]].focus();
      return;
    }
    submit.disabled = true;
    try {
      const started = await api(`${API}/start`, { method: "POST", body: formBody(form) });
      message.replaceChildren(h("span", { class: "ok", dataset: { runId: started.run_id } },
        "Queued ", h("a", { href: runHref(started.run_id), text: started.run_id })));
      onStarted(started);
    } catch (err) {
      showServerErrors(form, err, message);
    } finally {
      submit.disabled = false;
    }
  });
  return el;
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
  const columns = ["pick", "run", "status", "graph", "workers", "progress", "success", "eta", "started",
    "actions"];
  const state = { offset: 0, status: "" };
  const { el, body, heading } = panel("Runs", "runs-panel");
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; load(); });
  const filter = h("select", { id: "runs-filter", "aria-label": "filter runs by status" },
    option("", "all statuses"), RUN_STATUSES.map((s) => option(s)));
  filter.addEventListener("change", () => { state.status = filter.value; state.offset = 0; load(); });
  const compare = h("button", { type: "button", id: "compare-picked", disabled: true,
    text: "Compare 2 picked" });
  compare.addEventListener("click", () => {
    location.hash = `#/compare?a=${enc(on.picked[0])}&b=${enc(on.picked[1])}`;
  });
  body.append(h("div", { class: "toolbar" }, filter, compare, pager.el),
    scroller(h("table", { class: "runs", id: "runs-table" }, runTableHead(columns), tbody)));
  async function load() {
    const query = new URLSearchParams({ offset: state.offset, limit: PAGE_SIZE });
    if (state.status) query.set("status", state.status);
    const data = await get(`${API}/runs?${query}`);
    if (!data) return;
    data.runs.forEach((s) => on.remember(s));
    fillRows(tbody, data.runs.map((s) => runRow(columns, s, on)), columns.length,
      "No runs yet — start one above.");
    pager.update(state.offset, data.runs.length, data.total);
    heading.textContent = `Runs (${data.total})`;
  }
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(tbody, err)), LIST_REFRESH_MS);
  return {
    el, load, refresh, compare,
    // A run not on this page appears by reloading page 1 when it would be listed there.
    wants: (summary) => state.offset === 0 && (!state.status || state.status === summary.status),
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

function runsView(ctx) {
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

// ---------------------------------------------------------------------------------------
// #/run/<id>

function metricNames(summary) {
  const names = Object.keys(summary.aggregate_metrics ?? {});
  return names.sort((a, b) => (a === "success" ? -1 : b === "success" ? 1 : a.localeCompare(b)));
}

function runHeader(ctx, runId, onAction) {
  const status = h("span", { class: "status-slot" });
  const progress = progressBox();
  const eta = h("span", { class: "eta" });
  const actions = h("span", { class: "actions" });
  const facts = h("p", { class: "facts" });
  const problem = h("div", { class: "run-error" });
  const logs = ["stdout", "stderr"].map((which) => h("a", {
    href: withToken(`${runApi(runId)}/logs/${which}`), target: "_blank", rel: "noopener",
    text: `${which}.log`,
  }));
  const compare = h("a", { href: `#/compare?a=${enc(runId)}`, text: "compare with…" });
  const el = h("header", { class: "run-header" },
    h("div", { class: "title-row" }, h("h1", {}, `Run ${runId}`), status, actions),
    h("div", { class: "progress-row" }, progress, eta,
      h("span", { class: "links" }, logs, compare)),
    facts, problem);
  return {
    el,
    fill(summary, source) {
      status.replaceChildren(statusBadge(summary.status));
      setProgress(progress, summary, source);
      eta.textContent = etaText(summary);
      if (actions.dataset.status !== summary.status) {
        actions.dataset.status = summary.status;
        actions.replaceChildren(...runActions(summary, onAction));
      }
      facts.textContent = `graph ${summary.graph_name} · started ${fmtTime(summary.timings?.started_at)}`
        + ` · finished ${fmtTime(summary.timings?.finished_at)}`
        + (summary.waiting_reason ? ` · waiting: ${summary.waiting_reason}` : "");
      put(problem, summary.error ? notice(`Run error: ${summary.error}`, "error") : null);
    },
  };
}

function aggregateTable(aggregates, names) {
  if (!names.length) return notice("No completed episodes yet.");
  return dataTable("aggregate-table", ["Metric", "Mean", "95 % interval", "n", "missing", "method"],
    names.map((name) => {
      const a = aggregates[name];
      return h("tr", { dataset: { metric: name } }, rowHead(name), num(fmtNum(a.mean)),
        num(fmtInterval(a.lo, a.hi)), num(a.n), num(a.n_missing ?? 0), h("td", {}, a.method));
    }), [1, 2, 3, 4]);
}

// Errors (episode status ≠ completed) are the run's failures; task failures are success = 0.
function outcomeBlock(summary, showEpisodes) {
  const counts = summary.status_counts ?? {};
  const completed = counts.completed ?? 0;
  const success = summary.aggregate_metrics?.success;
  const successes = success && isNum(success.mean) ? Math.round(success.mean * success.n) : null;
  const failures = successes === null ? null : success.n - successes;
  const errors = Object.entries(counts).filter(([status]) => status !== "completed");
  const errorTotal = errors.reduce((sum, [, n]) => sum + n, 0);
  const stat = (label, value, kind, filter) => h("button", {
    type: "button", class: `stat ${kind}`, "data-outcome": kind, onclick: () => showEpisodes(filter),
  }, h("strong", {}, value ?? "–"), h("span", {}, label));
  return h("div", { class: "outcomes" },
    stat("completed", completed, "completed", "status:completed"),
    stat("successes", successes, "success", "outcome:success"),
    stat("task failures (success = 0)", failures, "failure", "outcome:failure"),
    stat("errors (did not complete)", errorTotal, "error", "outcome:error"),
    errors.length ? h("p", { class: "error-breakdown" }, "errors by status: ",
      errors.map(([status, n]) => `${status} ${n}`).join(" · ")) : null);
}

function taskRows(summary, metric) {
  return Object.entries(summary.aggregate_by_task ?? {}).map(([task, aggregates]) => {
    const a = aggregates[metric] ?? {};
    return { label: task, mean: a.mean, lo: a.lo, hi: a.hi, note: `n=${a.n ?? 0}` };
  });
}

function perTaskBlock(summary, names, state) {
  const tasks = Object.entries(summary.aggregate_by_task ?? {});
  if (!tasks.length) return [notice("No per-task results yet.")];
  const select = h("select", { "aria-label": "metric for the chart" }, names.map((n) => option(n)));
  select.value = state.metric;
  const chartSlot = h("div", { class: "chart-wrap", id: "task-chart" });
  const draw = () => {
    state.metric = select.value;
    const rows = taskRows(summary, state.metric);
    const label = `${state.metric} per task`;
    chartSlot.replaceChildren(intervalChart(rows, { domain: chartDomain(rows), label }));
  };
  select.addEventListener("change", draw);
  draw();
  const meanAndInterval = (a) => (a ? `${fmtNum(a.mean)} ${fmtInterval(a.lo, a.hi)}` : "–");
  const table = dataTable("task-table", ["Task", "n", ...names.map((n) => `${n} [95 %]`)],
    tasks.map(([task, aggregates]) => h("tr", {}, rowHead(task),
      num(Object.values(aggregates)[0]?.n ?? 0), names.map((n) => num(meanAndInterval(aggregates[n]))))),
    Array.from({ length: names.length + 1 }, (_, i) => i + 1));
  return [scroller(table), h("label", { class: "inline" }, "Chart: ", select), chartSlot];
}

function configBlock(config) {
  return keyValues(Object.entries(config ?? {}).map(([key, value]) =>
    [key, Array.isArray(value) ? value.join(", ") : value === null ? "–" : String(value)]));
}

function determinismBlock(info) {
  if (!info) return notice("No determinism record.");
  const modes = Object.entries(info.shared_server_modes ?? {});
  return h("div", { class: "determinism", id: "determinism" },
    h("p", {}, h("span", { class: `badge ${info.guaranteed ? "st-completed" : "st-failed"}` },
      info.guaranteed ? "guaranteed" : "not guaranteed"),
    " results are independent of the worker count"),
    keyValues([["seed function", h("code", {}, info.seed_function ?? "–")],
      ["shared servers", modes.map(([name, mode]) => `${name}: ${mode}`).join(" · ") || "none"]]),
    info.reasons?.length ? h("ul", { class: "reasons" }, info.reasons.map((r) => h("li", {}, r))) : null);
}

function graphBlock(graph) {
  const env = graph.env;
  return [
    graph.description ? h("p", { class: "muted" }, graph.description) : null,
    env ? h("p", { class: "muted" }, `env ${env.nodeset} · tasks ${env.tasks?.join(", ") || "–"}`) : null,
    h("div", { class: "graph-wrap" }, graphDiagram(graph)),
    h("p", { class: "legend" }, h("span", { class: "swatch solid" }), " same step  ",
      h("span", { class: "swatch dashed" }), " next iteration"),
  ];
}

const EPISODE_SORTS = { index: "Index", task: "Task", status: "Status", steps: "Steps" };

function episodeOutcome(e) {
  if (e.status !== "completed") return ["error", "error"];
  const s = e.metrics?.success;
  if (s === null || s === undefined) return ["–", "none"];
  return s ? ["success", "success"] : ["failure", "failure"];
}

function episodeRow(runId, e, metrics) {
  const [outcome, kind] = episodeOutcome(e);
  return h("tr", { dataset: { index: e.index, outcome: kind } },
    num(h("a", { href: episodeHref(runId, e.index), text: e.index })),
    h("td", {}, e.task), num(e.episode_index),
    h("td", {}, statusBadge(e.status)), h("td", { class: `outcome ${kind}` }, outcome),
    num(e.steps), metrics.map((m) => num(fmtNum(e.metrics?.[m]))), num(e.attempts ?? 1),
    h("td", { class: "error-text", title: e.error || "" }, e.error ? truncate(e.error, 90) : ""));
}

const OUTCOME_FILTERS = [
  ["outcome:success", "successes"],
  ["outcome:failure", "task failures (success 0)"],
  ["outcome:error", "errors (not completed)"],
];

function episodeHead(sort, metrics, sortBy) {
  const [current, order] = sort.split(":");
  const plain = (label) => h("th", { scope: "col" }, label);
  const sortable = (key) => {
    const sorted = current === key;
    return h("th", { scope: "col", "aria-sort": sorted ? `${order}ending` : "none" },
      h("button", { type: "button", class: "sort", "data-sort": key, onclick: () => sortBy(key) },
        EPISODE_SORTS[key], sorted ? (order === "asc" ? " ▲" : " ▼") : ""));
  };
  return h("tr", {}, sortable("index"), sortable("task"), plain("Ep. #"), sortable("status"),
    plain("Outcome"), sortable("steps"), metrics.map(plain), plain("Attempts"), plain("Error"));
}

function episodeTable(ctx, runId) {
  const get = latestGet(ctx);
  const state = { offset: 0, filter: "", sort: "index:asc", metrics: [] };
  const { el, body, heading } = panel("Episodes", "episodes-panel");
  const thead = h("thead");
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; load(); });
  const filter = h("select", { id: "episode-filter", "aria-label": "filter episodes" },
    option("", "all episodes"),
    h("optgroup", { label: "outcome" }, OUTCOME_FILTERS.map(([value, text]) => option(value, text))),
    h("optgroup", { label: "status" }, EPISODE_STATUSES.map((s) => option(`status:${s}`, s))));
  filter.addEventListener("change", () => show(filter.value));
  body.append(h("div", { class: "toolbar" }, filter, pager.el),
    scroller(h("table", { class: "data", id: "episode-table" }, thead, tbody)));
  function show(value) {
    Object.assign(state, { filter: value, offset: 0 });
    filter.value = value;
    load();
  }
  function sortBy(key) {
    const [current, order] = state.sort.split(":");
    state.sort = `${key}:${current === key && order === "asc" ? "desc" : "asc"}`;
    state.offset = 0;
    load();
  }
  async function load() {
    const query = new URLSearchParams({ offset: state.offset, limit: PAGE_SIZE, sort: state.sort });
    const [kind, value] = state.filter.split(":");
    if (value) query.set(kind, value);
    const data = await get(`${runApi(runId)}/episodes?${query}`);
    if (!data) return;
    thead.replaceChildren(episodeHead(state.sort, state.metrics, sortBy));
    fillRows(tbody, data.episodes.map((e) => episodeRow(runId, e, state.metrics)),
      8 + state.metrics.length, "No episodes match.");
    pager.update(state.offset, data.episodes.length, data.total);
    heading.textContent = `Episodes (${data.total}${state.filter ? ` matching ${state.filter}` : ""})`;
  }
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(tbody, err)), EPISODES_REFRESH_MS);
  return { el, load, refresh, show, setMetrics: (names) => { state.metrics = names; } };
}

// The run page's sections, laid out once; renderRun() refills them from a compact summary.
function runLayout(ctx, runId, onAction) {
  const page = {
    header: runHeader(ctx, runId, onAction),
    outcomes: panel("Outcomes", "outcomes-panel"),
    aggregates: panel("Aggregate metrics (95 % intervals)", "aggregates-panel"),
    tasks: panel("Per task", "tasks-panel"),
    config: panel("Config", "config-panel"),
    determinism: panel("Determinism", "determinism-panel"),
    graph: panel("Frozen graph", "graph-panel"),
    episodes: episodeTable(ctx, runId),
    taskState: { metric: "success" },
  };
  page.showEpisodes = (filter) => {
    page.episodes.show(filter);
    page.episodes.el.scrollIntoView({ behavior: "smooth" });
  };
  ctx.root.append(page.header.el, h("div", { class: "grid two" }, page.outcomes.el, page.aggregates.el),
    page.tasks.el, page.episodes.el, page.graph.el,
    h("div", { class: "grid two" }, page.config.el, page.determinism.el));
  return page;
}

function renderRun(page, summary, source) {
  const names = metricNames(summary);
  if (!names.includes(page.taskState.metric)) page.taskState.metric = names[0];
  page.header.fill(summary, source);
  put(page.outcomes.body, outcomeBlock(summary, page.showEpisodes));
  put(page.aggregates.body, aggregateTable(summary.aggregate_metrics ?? {}, names));
  put(page.tasks.body, perTaskBlock(summary, names, page.taskState));
  put(page.config.body, configBlock(summary.config));
  put(page.determinism.body, determinismBlock(summary.determinism));
  page.episodes.setMetrics(names);
}

function runView(ctx, runId) {
  const get = latestGet(ctx);
  let summary = null;
  const page = runLayout(ctx, runId, (kind, id, button) => runAction(kind, id, button).then(reload));
  async function load() {
    const fresh = await get(`${API}/status/${enc(runId)}?compact=true`);
    if (!fresh) return;
    summary = fresh;
    renderRun(page, summary, "load");
    await page.episodes.load();
  }
  function reload() {
    load().catch((err) => ctx.fail(page.outcomes.body, err));
  }
  api(`${runApi(runId)}/graph`)
    .then((graph) => ctx.alive && put(page.graph.body, graphBlock(graph)))
    .catch((err) => ctx.fail(page.graph.body, err));
  reload();
  const redraw = ctx.throttle(() => renderRun(page, summary, "ws"), RUN_FLUSH_MS);
  ctx.listen((message) => {
    if (message.type === "live_open" && message.reconnect && summary) reload();
    if (message.source !== "eval" || message.run_id !== runId || !summary) return;
    if (message.type === "eval_complete") {
      reload();
      return;
    }
    const next = eventSummary(message, summary);
    if (!next) return;
    summary = { ...summary, ...next };
    redraw();
    page.episodes.refresh();
  });
  ctx.every(POLL_MS, () => {
    if (!isLive() && summary && ACTIVE.has(summary.status)) reload();
  });
}

// ---------------------------------------------------------------------------------------
// #/run/<id>/episode/<idx>

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

function framePlayer(ctx, runId, index, assets, onStep) {
  const views = framesByView(assets);
  if (!views.size) {
    const text = "No frames saved for this episode (start the run with “Save frames”).";
    return { el: notice(text), showStep() {} };
  }
  const frameUrl = (frame) => withToken(`${runApi(runId)}/episodes/${index}/assets/${enc(frame.name)}`);
  const player = new FramePlayer(views, frameUrl, onStep);
  ctx.onDispose(() => player.dispose());
  return player;
}

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

function nodeStats(records) {
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
function firingLog(records, onStep) {
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

function episodeFacts(e) {
  const [outcome] = episodeOutcome(e);
  const metrics = Object.entries(e.metrics ?? {}).map(([k, v]) => `${k} ${fmtNum(v)}`).join(" · ");
  const nodeErrors = Object.entries(e.node_errors ?? {}).map(([n, msg]) => h("li", {}, `${n}: ${msg}`));
  return [
    keyValues([
      ["task", e.task], ["episode index", e.episode_index], ["seed", e.seed],
      ["status", statusBadge(e.status)], ["outcome", outcome],
      ["steps", `${e.steps} (budget ${e.step_budget ?? "–"})`], ["metrics", metrics || "–"],
      ["attempts", e.attempts ?? 1], ["instruction", e.instruction || "–"],
      ["duration", fmtDuration(e.duration_s)],
    ]),
    e.error ? notice(`Error: ${e.error}`, "error") : null,
    nodeErrors.length ? h("ul", { class: "reasons" }, nodeErrors) : null,
  ];
}

function episodeCrumbs(runId, index) {
  const previous = index > 0
    ? h("a", { href: episodeHref(runId, index - 1), text: "‹ previous", id: "prev-episode" }) : null;
  return h("nav", { class: "crumbs" }, h("a", { href: "#/", text: "Runs" }), " / ",
    h("a", { href: runHref(runId), text: runId }), ` / episode ${index}  `, previous, " ",
    h("a", { href: episodeHref(runId, index + 1), text: "next ›", id: "next-episode" }));
}

function episodeView(ctx, runId, index) {
  const facts = panel(`Episode ${index}`, "episode-panel");
  const frames = panel("Frames", "frames-panel");
  const log = panel("Firing log", "log-panel");
  const stats = panel("Per node", "node-panel");
  const raw = h("pre", { class: "json", id: "episode-json" });
  ctx.root.append(episodeCrumbs(runId, index), h("div", { class: "grid two" }, facts.el, frames.el),
    log.el, stats.el, h("details", { class: "panel" }, h("summary", {}, "episode.json"), raw));
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
    put(log.body, firing.el, torn);
    put(stats.body, nodeStats(logData.records));
  }).catch((err) => ctx.fail(facts.body, err));
}

// ---------------------------------------------------------------------------------------
// #/compare?a=&b=

function runOption(r) {
  return option(r.run_id, `${r.run_id} · ${r.graph_name} · ${r.status} · SR ${fmtPct(r.success_rate)}`);
}

function comparePicker(runs, a, b) {
  const select = (name, value) => {
    const el = h("select", { name, id: `compare-${name}`, "aria-label": `run ${name.toUpperCase()}` },
      option("", "pick a run"), runs.map(runOption));
    if (value && !runs.some((r) => r.run_id === value)) el.append(option(value));
    el.value = value;
    return el;
  };
  const [left, right] = [select("a", a), select("b", b)];
  const swap = h("button", { type: "button", text: "⇄", title: "swap A and B",
    onclick: () => { [left.value, right.value] = [right.value, left.value]; } });
  const form = h("form", { class: "compare-picker", id: "compare-form" },
    h("label", {}, "A ", left), swap, h("label", {}, "B ", right),
    h("button", { type: "submit", class: "primary", text: "Compare" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/compare?a=${enc(left.value)}&b=${enc(right.value)}`;
  });
  return form;
}

// Config fields that change what is written, never a score (worker_count is left out server-side).
const OUTPUT_ONLY_FIELDS = new Set(["save_frames", "record_log"]);

function configWarning(allDifferences, configA, configB) {
  const known = (field) => field in (configA ?? {}) || field in (configB ?? {});
  const value = (config, field) => JSON.stringify(config?.[field] ?? null);
  const change = (field) => (known(field)
    ? `${value(configA, field)} → ${value(configB, field)}` : "differs");
  const differences = allDifferences.filter((f) => !OUTPUT_ONLY_FIELDS.has(f));
  const outputOnly = allDifferences.filter((f) => OUTPUT_ONLY_FIELDS.has(f));
  const rows = differences.map((field) => [field, change(field)]);
  const aside = outputOnly.length ? h("p", { class: "muted" }, "Also differs, without effect on scores: ",
    outputOnly.map((f) => `${f} ${change(f)}`).join(", "), ".") : null;
  return h("div", { class: "config-diff" }, configVerdict(differences, rows), aside);
}

function configVerdict(differences, rows) {
  if (differences.length > 1) {
    return h("div", { class: "notice warning", id: "config-warning", role: "alert" },
      h("strong", {}, `The configs differ in ${differences.length} fields, not just the one compared. `),
      "A difference in results cannot be attributed to any single one of them.", keyValues(rows));
  }
  if (differences.length === 1) {
    return h("div", { class: "notice info", id: "config-note" },
      `The configs differ only in ${differences[0]}.`, keyValues(rows));
  }
  return notice("Same config (worker count aside): paired episodes should match exactly.", "info");
}

function mcnemarBlock(data) {
  const m = data.mcnemar;
  const significant = isNum(m.p_value) && m.p_value < 0.05;
  let verdict = "The difference in success is not significant at the 5 % level.";
  if (m.a_only + m.b_only === 0) verdict = "No discordant pairs: the runs agree on every paired episode.";
  else if (significant) verdict = "The difference in success is significant at the 5 % level.";
  return h("div", { id: "mcnemar" }, keyValues([
    ["paired episodes", data.paired],
    ["A succeeded, B failed", m.a_only], ["B succeeded, A failed", m.b_only],
    ["McNemar p-value", isNum(m.p_value) ? m.p_value.toPrecision(3) : "–"],
  ]), h("p", { class: significant ? "verdict sig" : "verdict" }, verdict));
}

function perTaskDeltas(perTask) {
  const tasks = Object.entries(perTask);
  if (!tasks.length) return [notice("No paired completed episodes.")];
  const rate = (x, interval) => `${fmtPct(x)} ${interval ? fmtInterval(...interval, fmtPct) : ""}`;
  const sign = (d) => (d < 0 ? "neg" : d > 0 ? "pos" : "");
  const table = dataTable("delta-table", ["Task", "n", "A success", "B success", "Δ (B − A)", "Δ 95 %"],
    tasks.map(([task, t]) => h("tr", {}, rowHead(task), num(t.n), num(rate(t.a, t.a_interval)),
      num(rate(t.b, t.b_interval)), h("td", { class: `num ${sign(t.delta)}` }, fmtNum(t.delta)),
      num(fmtInterval(t.delta_lo, t.delta_hi)))), [1, 2, 3, 4, 5]);
  const rows = tasks.map(([task, t]) => ({
    label: task, mean: t.delta, lo: t.delta_lo, hi: t.delta_hi, note: `n=${t.n}`,
  }));
  const chart = intervalChart(rows, { domain: [-1, 1], label: "success delta per task" });
  return [scroller(table), h("div", { class: "chart-wrap" }, chart)];
}

function flipRow(data, f) {
  const mark = (ok) => h("span", { class: ok ? "outcome success" : "outcome failure" },
    ok ? "✓ success" : "✗ failure");
  const link = (run, idx) => (idx === undefined ? "–"
    : h("a", { href: episodeHref(run, idx), text: `ep ${idx}` }));
  return h("tr", { dataset: { direction: f.a ? "worse" : "better" } },
    h("td", {}, f.task), num(f.episode_index),
    h("td", {}, mark(f.a), " ", link(data.a, f.a_index)),
    h("td", {}, mark(f.b), " ", link(data.b, f.b_index)));
}

function flipsTable(data) {
  const state = { offset: 0, direction: "" };
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; draw(); });
  const filter = h("select", { "aria-label": "filter flips" }, option("", "all flips"),
    option("worse", "A ✓ → B ✗ (regressions)"), option("better", "A ✗ → B ✓ (improvements)"));
  filter.addEventListener("change", () => { state.direction = filter.value; state.offset = 0; draw(); });
  const direction = (f) => (f.a ? "worse" : "better");
  const flips = () => data.flips.filter((f) => !state.direction || state.direction === direction(f));
  function draw() {
    const list = flips();
    const page = list.slice(state.offset, state.offset + PAGE_SIZE);
    fillRows(tbody, page.map((f) => flipRow(data, f)), 4, "No episode flipped.");
    pager.update(state.offset, page.length, list.length);
  }
  draw();
  const labels = ["Task", "Ep. #", "A", "B"];
  const table = h("table", { class: "data", id: "flips-table" }, headRow(labels, [1]), tbody);
  return h("div", {}, h("div", { class: "toolbar" }, filter, pager.el), scroller(table));
}

function runCard(label, summary, runId) {
  const facts = `${summary.graph_name} · ${summary.episodes_done}/${summary.episodes_total} episodes`
    + ` · success ${fmtPct(successRate(summary))}`;
  return h("div", { class: "run-card" }, h("strong", {}, label), " ",
    h("a", { href: runHref(runId), text: runId }), " ", statusBadge(summary.status),
    h("div", { class: "muted" }, facts));
}

async function compareReport(ctx, a, b, container) {
  const [data, sa, sb, ga, gb] = await Promise.all([
    api(`${API}/compare?a=${enc(a)}&b=${enc(b)}`),
    api(`${API}/status/${enc(a)}?compact=true`), api(`${API}/status/${enc(b)}?compact=true`),
    api(`${runApi(a)}/graph`).catch(() => null), api(`${runApi(b)}/graph`).catch(() => null),
  ]);
  if (!ctx.alive) return;
  const differences = [...data.config_differences];
  if (ga && gb && JSON.stringify(ga) !== JSON.stringify(gb)) differences.push("frozen graph");
  const tests = panel("Paired test (McNemar, success)", "mcnemar-panel");
  const flips = panel(`Flips (${data.flips.length})`, "flips-panel");
  const deltas = panel("Per-task success deltas (B − A, 95 %)", "deltas-panel");
  tests.body.append(mcnemarBlock(data));
  flips.body.append(flipsTable(data));
  deltas.body.append(...perTaskDeltas(data.per_task));
  container.replaceChildren(configWarning(differences, sa.config, sb.config),
    h("div", { class: "grid two" }, runCard("A", sa, a), runCard("B", sb, b)),
    h("div", { class: "grid two" }, tests.el, flips.el), deltas.el);
}

function compareView(ctx, query) {
  const a = query.get("a") || "";
  const b = query.get("b") || "";
  const title = () => h("h1", {}, "Compare two runs");
  const picker = h("div", { class: "panel" }, title(), notice("loading runs…"));
  const report = h("div", { id: "compare-report" });
  ctx.root.append(picker, report);
  const hint = "Episodes are paired by (task, episode_index); only completed episodes with a success"
    + " value count.";
  api(`${API}/runs?limit=500`).then((data) => {
    if (!ctx.alive) return;
    picker.replaceChildren(title(), comparePicker(data.runs, a, b), h("p", { class: "muted" }, hint));
  }).catch((err) => ctx.fail(picker, err));
  if (!a || !b) {
    report.append(notice("Pick run A and run B."));
    return;
  }
  report.append(notice("comparing…"));
  compareReport(ctx, a, b, report).catch((err) => ctx.fail(report, err));
}

// ---------------------------------------------------------------------------------------
// Router

const ROUTES = [
  [/^\/run\/([^/]+)\/episode\/(\d+)$/, (ctx, m) => episodeView(ctx, decodeURIComponent(m[1]), Number(m[2]))],
  [/^\/run\/([^/]+)$/, (ctx, m) => runView(ctx, decodeURIComponent(m[1]))],
  [/^\/compare$/, (ctx, _m, query) => compareView(ctx, query)],
  [/^\/?$/, (ctx) => runsView(ctx)],
];

let currentView = null;

function route() {
  currentView?.dispose();
  const root = document.getElementById("view");
  root.replaceChildren();
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  currentView = viewContext(root);
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active",
    a.dataset.nav === (path.startsWith("/compare") ? "compare" : "runs")));
  for (const [pattern, view] of ROUTES) {
    const match = pattern.exec(path || "/");
    if (match) {
      view(currentView, match, new URLSearchParams(query));
      window.scrollTo(0, 0);
      return;
    }
  }
  root.append(notice(`No page at ${location.hash}.`, "error"));
}

window.addEventListener("hashchange", route);
connectLive();
route();
