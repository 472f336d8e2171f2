// #/run/<id> — one run: header, outcomes, aggregates, per task, episodes, graph, config.

import { API, api, enc, latestGet, runApi, withToken } from "./api.js";
import { chartDomain, intervalChart } from "./charts.js";
import {
  dataTable, h, keyValues, notice, num, option, panel, put, rowHead, scroller, statusBadge,
} from "./dom.js";
import { determinismBlock } from "./determinism_view.js";
import { episodeTable } from "./episode_table.js";
import { fmtInterval, fmtNum, fmtTime, isNum } from "./format.js";
import { failureVideos } from "./failure_videos.js";
import { failuresPanel } from "./failures_panel.js";
import { graphDiagram } from "./graph_view.js";
import { eventSummary, isLive, POLL_MS } from "./live.js";
import { distributionsUrl, histogramBlock } from "./run_histograms.js";
import { runMetaBlock } from "./run_meta_editor.js";
import {
  ACTIVE, allEpisodesEnded, coverageText, errorCount, etaText, healthView, notNeeded,
} from "./run_facts.js";
import { healthBadge, progressBox, runAction, runActions, setProgress } from "./run_summary.js";
import { retryLinks } from "./retry_links.js";
import { makeSortable } from "./sortable.js";
import { liveCsLine, stopBlock } from "./stop_rules.js";

const RUN_FLUSH_MS = 500;

function metricNames(summary) {
  const names = Object.keys(summary.aggregate_metrics ?? {});
  return names.sort((a, b) => (a === "success" ? -1 : b === "success" ? 1 : a.localeCompare(b)));
}

const UNHEALTHY = new Set(["errors", "failed", "aborted"]);

function runHeader(ctx, runId, onAction) {
  const status = h("span", { class: "status-slot" });
  const health = h("span", { class: "health-slot", id: "header-health" });
  const title = h("h1", {}, `Run ${runId}`);
  const idLine = h("small", { class: "run-id" });
  const meta = runMetaBlock(ctx, runId, (m) => {
    title.textContent = m.name || `Run ${runId}`;
    idLine.textContent = m.name ? `run ${runId}` : "";
  });
  const lineage = retryLinks(ctx, runId);
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
    h("div", { class: "title-row" }, title, idLine, status, health, actions), meta.el, lineage.el,
    h("div", { class: "progress-row" }, progress, eta,
      h("span", { class: "links" }, logs, downloads, compare)),
    facts, problem);
  return {
    el,
    meta,
    fill(summary, source) {
      status.replaceChildren(statusBadge(summary.status));
      lineage.fill(summary);
      health.replaceChildren(healthBadge(summary));
      el.classList.toggle("unhealthy", UNHEALTHY.has(summary.health?.verdict));
      setProgress(progress, summary, source);
      eta.textContent = etaText(summary);
      const actionKey = `${summary.status}/${allEpisodesEnded(summary)}`;
      if (actions.dataset.status !== actionKey) {
        actions.dataset.status = actionKey;
        actions.replaceChildren(...runActions(summary, onAction));
      }
      facts.textContent = `graph ${summary.graph_name} · started ${fmtTime(summary.timings?.started_at)}`
        + ` · finished ${fmtTime(summary.timings?.finished_at)}`
        + (summary.waiting_reason ? ` · waiting: ${summary.waiting_reason}` : "");
      put(problem, summary.error ? notice(`Run error: ${summary.error}`, "error") : null);
    },
  };
}

function aggregateTable(summary, names) {
  const aggregates = summary.aggregate_metrics ?? {};
  const errors = errorCount(summary);
  if (!names.length && errors && !(summary.status_counts?.completed)) {
    return notice(`No episode completed: ${errors} ended in error, so there is no score. `
      + "See the errors below.", "error");
  }
  if (!names.length) return notice("No completed episodes yet.");
  return dataTable("aggregate-table", ["Metric", "Kind", "Mean", "95 % interval", "scored (of planned)",
    "errors", "errors as failures", "worst–best", "missing", "interval method"],
  names.map((name) => {
    const a = aggregates[name];
    const planned = isNum(a.n_planned) ? { episodes_total: a.n_planned } : summary;
    return h("tr", { dataset: { metric: name } }, rowHead(name), h("td", {}, kindText(a)),
      num(fmtNum(a.mean)), num(fmtInterval(a.lo, a.hi)), num(coverageText(a.n, planned)),
      num(a.n_errors ?? "–"), num(fmtNum(a.errors_as_failures)),
      num(isNum(a.worst) ? `${fmtNum(a.worst)}–${fmtNum(a.best)}` : "–"), num(a.n_missing ?? 0),
      h("td", { title: a.note ?? "" }, a.method_name || a.method,
        a.note ? h("span", { class: "ci method-note" }, ` — ${a.note}`) : null));
  }), [2, 3, 4, 5, 6, 7, 8]);
}

// "bounded [0, 1]", "binary (inferred)": the metric's kind, which decides its interval.
function kindText(a) {
  if (!a.kind) return "–";
  const range = a.kind === "bounded" && a.range ? ` [${a.range[0]}, ${a.range[1]}]` : "";
  return `${a.kind}${range}${a.kind_source === "inferred" ? " (inferred)" : ""}`;
}

// Errors (the server's count: error, exception, timeout, no_verdict) are the run's failures;
// task failures are success = 0; the status counts are shown as served.
function outcomeBlock(summary, showEpisodes) {
  const counts = summary.status_counts ?? {};
  const completed = counts.completed ?? 0;
  const success = summary.aggregate_metrics?.success;
  const successes = success && isNum(success.mean) ? Math.round(success.mean * success.n) : null;
  const failures = successes === null ? null : success.n - successes;
  const errorTotal = errorCount(summary);
  const cancelled = counts.cancelled ?? 0;
  // The rest of a plan that a stop rule decided early was not needed: not "not run".
  const skipped = notNeeded(summary);
  const notRun = ACTIVE.has(summary.status) || skipped ? 0
    : Math.max(0, (summary.episodes_total ?? 0) - (summary.episodes_done ?? 0) - cancelled);
  // A count of 0 is grey: no red "0 errors" beside a run that simply stopped early.
  const stat = (label, value, kind, filter) => h("button", {
    type: "button", class: `stat ${kind}${value === 0 ? " zero" : ""}`, "data-outcome": kind,
    onclick: () => showEpisodes(filter),
  }, h("strong", {}, value ?? "–"), h("span", {}, label));
  const others = Object.entries(counts).filter(([status]) => status !== "completed");
  return h("div", { class: "outcomes" },
    stat("completed", completed, "completed", "status:completed"),
    stat(`successes (${coverageText(success?.n, summary)})`, successes, "success", "outcome:success"),
    stat("task failures (success = 0)", failures, "failure", "outcome:failure"),
    stat("errors (raised, timed out, no verdict)", errorTotal, "error", "outcome:error"),
    cancelled ? stat("cancelled (run stopped)", cancelled, "cancelled", "outcome:cancelled") : null,
    notRun ? h("div", { class: "stat not-run", "data-outcome": "not-run" },
      h("strong", {}, notRun), h("span", {}, "not run")) : null,
    skipped ? h("div", { class: "stat not-needed", "data-outcome": "not-needed",
      title: "the stop rule decided on the episodes before them (see Stop rule)" },
    h("strong", {}, skipped), h("span", {}, "not needed (the stop rule decided)")) : null,
    errorTotal ? h("p", { class: "error-breakdown" }, "episodes by status: ",
      others.map(([status, n]) => `${status} ${n}`).join(" · ")) : null,
    healthLine(summary));
}

// The server's health verdict and its reason: a run with errors never looks like a clean one.
function healthLine(summary) {
  const health = healthView(summary);
  if (!health) return null;
  return h("p", { class: "health", id: "run-health", dataset: { verdict: health.verdict } },
    h("span", { class: `badge ${health.className}` }, `health: ${health.verdict}`),
    health.reason ? ` ${health.reason}` : "");
}

function taskRows(summary, metric) {
  return Object.entries(summary.aggregate_by_task ?? {}).map(([task, aggregates]) => {
    const a = aggregates[metric] ?? {};
    return { label: task, mean: a.mean, lo: a.lo, hi: a.hi, note: taskCoverageText(a.n, summary) };
  });
}

// A task's name filters the episode table to it.
function taskLink(task, showTask) {
  return h("button", { type: "button", class: "link task-link", dataset: { task },
    title: "show this task's episodes", onclick: () => showTask(task) }, task);
}

// "n = 2 of 6": a task's completed episodes out of those planned for it.
function taskCoverageText(n, summary) {
  const planned = summary.config?.episode_count;
  return isNum(planned) ? `n = ${n ?? 0} of ${planned}` : `n = ${n ?? 0}`;
}

// One row per task with results, then one per planned task without any (a run cancelled
// early may never have reached it): its coverage says so instead of the row going missing.
function perTaskBlock(summary, names, state, showTask, planned) {
  const byTask = summary.aggregate_by_task ?? {};
  const tasks = [...Object.entries(byTask), ...planned.filter((t) => !(t in byTask)).map((t) => [t, {}])];
  if (!Object.keys(byTask).length) return [notice("No per-task results yet.")];
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
  const meanCell = (a) => h("td", { class: "num", dataset: { sort: isNum(a?.mean) ? String(a.mean) : "" } },
    a && isNum(a.mean) ? `${fmtNum(a.mean)} ${fmtInterval(a.lo, a.hi)}` : "–");
  // A task whose every episode errored is listed: its errors show, and its score is "–".
  const errorsOf = (aggregates) => Object.values(aggregates)[0]?.n_errors ?? 0;
  const scoredOf = (aggregates) => Object.values(aggregates)[0]?.n;
  const table = dataTable("task-table",
    ["Task", "scored (of planned)", "errors", ...names.map((n) => `${n} [95 %]`)],
    tasks.map(([task, aggregates]) => h("tr", { dataset: { task, errors: String(errorsOf(aggregates)) } },
      rowHead(taskLink(task, showTask)),
      h("td", { class: "num", dataset: { sort: String(scoredOf(aggregates) ?? "") } },
        taskCoverageText(scoredOf(aggregates), summary)),
      num(errorsOf(aggregates)),
      names.map((n) => meanCell(aggregates[n])))),
    Array.from({ length: names.length + 2 }, (_, i) => i + 1));
  // Every column sorts; a metric's first click puts the best (highest) first.
  const keys = ["task", "scored", "errors", ...names.map((n) => `metric.${n}`)];
  makeSortable(table, keys, state, Object.fromEntries(names.map((n) => [`metric.${n}`, "desc"])));
  return [scroller(table), h("label", { class: "inline" }, "Chart: ", select), chartSlot];
}

function configBlock(config, budgets) {
  const shown = (key, value) => {
    if (key === "step_budget" && value === null && budgets?.length) {
      return h("span", { id: "effective-step-budget" }, `${budgets.join(", ")} `,
        h("span", { class: "muted" }, "(effective, from the graph or env; not set for the run)"));
    }
    return Array.isArray(value) ? value.join(", ") : value === null ? "–" : String(value);
  };
  return keyValues(Object.entries(config ?? {}).map(([key, value]) => [key, shown(key, value)]));
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
    stop: panel("Stop rule", "stop-report"),
    outcomes: panel("Outcomes", "outcomes-panel"),
    aggregates: panel("Aggregate metrics (95 % intervals)", "aggregates-panel"),
    tasks: panel("Per task", "tasks-panel"),
    histograms: panel("Distributions per task (completed episodes)", "histograms-panel"),
    config: panel("Config", "config-panel"),
    determinism: panel("Determinism", "determinism-panel"),
    graph: panel("Frozen graph", "graph-panel"),
    failures: failuresPanel(ctx, runId),
    taskState: { metric: "success", sort: "" },
  };
  page.episodes = episodeTable(ctx, runId, (total) => page.onRecorded(total));
  page.showTask = (task) => {
    page.episodes.showTask(task);
    page.episodes.el.scrollIntoView({ behavior: "smooth" });
  };
  page.showEpisodes = (filter) => {
    page.episodes.show(filter);
    page.episodes.el.scrollIntoView({ behavior: "smooth" });
  };
  page.stop.el.hidden = true;
  ctx.root.append(page.header.el, page.stop.el,
    h("div", { class: "grid two" }, page.outcomes.el, page.aggregates.el), page.failures.el,
    page.tasks.el, page.histograms.el, page.episodes.el, page.graph.el,
    h("div", { class: "grid two" }, page.config.el, page.determinism.el));
  return page;
}

// While a run goes, its progress counts the records the episode table lists (one source for
// both numbers), less those recorded as cancelled, which episodes_done leaves out too; when
// the run has ended, the summary's counts are final.
function shownSummary(page, summary) {
  if (!ACTIVE.has(summary.status) || page.recorded === null) return summary;
  const cancelled = summary.status_counts?.cancelled ?? 0;
  return { ...summary, episodes_done: Math.max(0, page.recorded - cancelled) };
}

function runTasks(summary, graph, dist) {
  return [...new Set([...(summary.config?.tasks ?? []), ...(graph?.env?.tasks ?? []),
    ...Object.keys(summary.aggregate_by_task ?? {}), ...Object.keys(dist?.tasks ?? {})])].sort();
}

function renderRun(page, summary, source) {
  const names = metricNames(summary);
  if (!names.includes(page.taskState.metric)) page.taskState.metric = names[0];
  page.header.fill(shownSummary(page, summary), source);
  put(page.outcomes.body, outcomeBlock(summary, page.showEpisodes));
  put(page.aggregates.body, scroller(aggregateTable(summary, names)),
    liveCsLine(summary, ACTIVE.has(summary.status)));
  const stop = stopBlock(summary);
  page.stop.el.hidden = !stop;
  put(page.stop.body, stop);
  renderTasks(page, summary, names);
  put(page.config.body, configBlock(summary.config, page.dist?.step_budgets));
  put(page.determinism.body, determinismBlock(summary.determinism));
  page.episodes.setMetrics(names);
}

// The per-task block and the episode table's task filter, again once the graph (which names
// the planned tasks) has come.
function renderTasks(page, summary, names = metricNames(summary)) {
  const tasks = runTasks(summary, page.graphDoc, page.dist);
  put(page.tasks.body, perTaskBlock(summary, names, page.taskState, page.showTask, tasks));
  page.episodes.setTasks(tasks);
}

function noSuchRun(ctx, runId) {
  ctx.root.replaceChildren(h("section", { class: "panel", id: "no-such-run" },
    h("h1", {}, "No such run"),
    h("p", {}, "There is no run ", h("code", {}, runId), " in this workspace."),
    h("p", {}, h("a", { href: "#/", id: "back-to-runs" }, "← back to the runs list"))));
}

export function runView(ctx, runId) {
  const get = latestGet(ctx);
  let summary = null;
  let missing = false;
  const page = runLayout(ctx, runId, (kind, id, button) => runAction(kind, id, button).then(reload));
  Object.assign(page, { recorded: null, dist: null, graphDoc: null });
  page.onRecorded = (total) => {
    page.recorded = total;
    if (summary) page.header.fill(shownSummary(page, summary));
  };
  async function load() {
    const fresh = await get(`${API}/status/${enc(runId)}?compact=true`);
    if (!fresh) return;
    summary = fresh;
    page.dist = await api(distributionsUrl(runId)).catch(() => page.dist);
    if (!ctx.alive) return;
    put(page.histograms.body, histogramBlock(page.dist));
    renderRun(page, summary, "load");
    page.failures.load(summary); // its own errors show in its panel
    await page.episodes.load();
  }
  function reload() {
    if (missing) return;
    load().catch((err) => {
      if (!summary && (err.status === 404 || err.status === 422)) {
        missing = true;
        noSuchRun(ctx, runId);
        return;
      }
      ctx.fail(page.outcomes.body, err);
    });
  }
  api(`${runApi(runId)}/graph`)
    .then((graph) => {
      if (!ctx.alive || missing) return;
      page.graphDoc = graph;
      put(page.graph.body, graphBlock(graph));
      if (summary) renderTasks(page, summary);
    })
    .catch((err) => !missing && ctx.fail(page.graph.body, err));
  page.header.meta.load().catch(() => {});
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
