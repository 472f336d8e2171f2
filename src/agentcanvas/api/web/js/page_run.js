// #/run/<id> — one run: header, outcomes, aggregates, per task, episodes, graph, config.

import { API, api, enc, latestGet, runApi, withToken } from "./api.js";
import { chartDomain, intervalChart } from "./charts.js";
import {
  dataTable, h, keyValues, notice, num, option, panel, put, rowHead, scroller, statusBadge,
} from "./dom.js";
import { episodeTable } from "./episode_table.js";
import { fmtInterval, fmtNum, fmtTime, isNum } from "./format.js";
import { failureVideos } from "./failure_videos.js";
import { graphDiagram } from "./graph_view.js";
import { eventSummary, isLive, POLL_MS } from "./live.js";
import { ACTIVE, etaText, progressBox, runAction, runActions, setProgress } from "./run_summary.js";

const RUN_FLUSH_MS = 500;

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
  // Downloads: the summary with every record, and one CSV row per episode.
  const downloads = [["summary.json", "summary.json"], ["episodes.csv", "episodes CSV"]].map(
    ([file, text]) => h("a", {
      href: withToken(`${runApi(runId)}/${file}`), download: `${runId}_${file}`, text,
      class: "download", dataset: { download: file },
    }));
  const compare = h("a", { href: `#/compare?a=${enc(runId)}`, text: "compare with…" });
  const el = h("header", { class: "run-header" },
    h("div", { class: "title-row" }, h("h1", {}, `Run ${runId}`), status, actions),
    h("div", { class: "progress-row" }, progress, eta,
      h("span", { class: "links" }, logs, downloads, compare)),
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
      errors.map(([status, n]) => `${status} ${n}`).join(" · ")) : null,
    healthLine(summary.health));
}

// The run's health verdict: a run with errors never looks like a clean one.
function healthLine(health) {
  if (!health) return null;
  const kind = health.verdict === "clean" ? "st-completed"
    : health.verdict === "in_progress" ? "st-running" : "st-failed";
  return h("p", { class: "health", id: "run-health" },
    h("span", { class: `badge ${kind}` }, `health: ${health.verdict}`),
    health.reason ? ` ${health.reason}` : "");
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
    batchedFunctions(info.batched_functions),
    info.reasons?.length ? h("ul", { class: "reasons" }, info.reasons.map((r) => h("li", {}, r))) : null);
}

// Every batched function the run used: its mode, how it was verified, the audit, a mismatch.
function batchedFunctions(functions) {
  const rows = Object.entries(functions ?? {}).sort(([a], [b]) => a.localeCompare(b));
  if (!rows.length) return null;
  const mismatch = (f) => (f.mismatch == null ? "–" : `${f.mismatch}${isNum(f.first_episode_affected)
    ? ` (first episode affected: ${f.first_episode_affected})` : ""}`);
  return scroller(dataTable("batched-functions",
    ["Batched function", "Mode", "Verified by", "Audited", "Batched", "Mismatch"],
    rows.map(([name, f]) => h("tr", { "data-function": name, "data-verified": String(!!f.verified) },
      rowHead(name),
      h("td", {}, h("span", { class: `badge ${f.verified ? "st-completed" : "st-failed"}` }, f.mode)),
      h("td", {}, f.verified_by ?? "–"), num(f.batches_audited ?? 0), num(f.batched_requests ?? 0),
      h("td", {}, mismatch(f)))),
    [3, 4]));
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

export function runView(ctx, runId) {
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
  failureVideos(ctx, runId, page.tasks.el);
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
