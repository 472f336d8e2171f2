// #/compare?a=&b= — two runs paired by (task, episode_index): config diff, overall paired
// difference, McNemar, flips, per-task deltas. #/compare?runs=A,B,C adds a leaderboard of N runs.

import { API, api, enc, episodeHref, runApi } from "./api.js";
import { intervalChart } from "./charts.js";
import {
  dataTable, fillRows, h, headRow, keyValues, notice, num, option, panel, rowHead, scroller,
  statusBadge,
} from "./dom.js";
import { fmtInterval, fmtNum, fmtPct, fmtPp, fmtPpInterval, isNum } from "./format.js";
import { leaderboardPanel, leaderboardPicker } from "./leaderboard.js";
import { PAGE_SIZE, pagerBar } from "./pager.js";
import { stoppedEarly, successRate } from "./run_facts.js";
import { runLabel } from "./run_rows.js";
import { sequentialVerdict } from "./stop_rules.js";

// A run in a picker: its name first (the id beside it), its tags, graph, status and success.
function runOption(r) {
  const name = r.name ? `${r.name} — ${r.run_id}` : r.run_id;
  const tags = r.tags?.length ? ` [${r.tags.join(", ")}]` : "";
  const el = option(r.run_id, `${name}${tags} · ${r.graph_name} · ${r.status} · SR ${fmtPct(r.success_rate)}`);
  el.title = r.run_id;
  return el;
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
const OUTPUT_ONLY_FIELDS = new Set(["save_frames", "frames", "record_log"]);
// A stop rule's fields decide how many episodes of the plan ran, never a paired episode's score.
const STOP_RULE_FIELDS = new Set(["until_halfwidth", "until_decided_vs", "stop_alpha"]);
// Which episodes a run planned (a retry lists them), never a paired episode's score: the
// pairing by (task, episode_index) takes care of them.
const PLAN_FIELDS = new Set(["episodes", "retry_of", "episode_count", "tasks", "start_index",
  "max_errors"]);

function configWarning(allDifferences, configA, configB, graphLines = []) {
  const known = (field) => field in (configA ?? {}) || field in (configB ?? {});
  const value = (config, field) => JSON.stringify(config?.[field] ?? null);
  const change = (field) => (known(field)
    ? `${value(configA, field)} → ${value(configB, field)}` : "differs");
  const scoring = (f) => !OUTPUT_ONLY_FIELDS.has(f) && !STOP_RULE_FIELDS.has(f) && !PLAN_FIELDS.has(f);
  const differences = allDifferences.filter(scoring);
  const outputOnly = allDifferences.filter((f) => OUTPUT_ONLY_FIELDS.has(f));
  const stopRule = allDifferences.filter((f) => STOP_RULE_FIELDS.has(f));
  const plan = allDifferences.filter((f) => PLAN_FIELDS.has(f));
  const rows = differences.filter((f) => f !== GRAPH).map((field) => [field, change(field)])
    .concat(graphLines);
  const aside = outputOnly.length ? h("p", { class: "muted" }, "Also differs, without effect on scores: ",
    outputOnly.map((f) => `${f} ${change(f)}`).join(", "), ".") : null;
  const stopAside = stopRule.length ? h("p", { class: "muted", id: "config-stop-rule" },
    "Also differs, the stop rule (how many episodes ran, not a paired episode's score): ",
    stopRule.map((f) => `${f} ${change(f)}`).join(", "), ".") : null;
  const planAside = plan.length ? h("p", { class: "muted", id: "config-plan" },
    "Also differs, which episodes each run planned (the pairing takes care of it): ",
    plan.join(", "), ".") : null;
  return h("div", { class: "config-diff" }, configVerdict(differences, rows), aside, stopAside,
    planAside);
}

// What the reader must know about the comparison, in the server's words (different seeds,
// a frozen graph that could not be read…).
function caveatsBlock(caveats) {
  if (!caveats?.length) return null;
  return h("div", { id: "compare-caveats" },
    caveats.map((text) => h("p", { class: "notice warning caveat" }, text)));
}

// What differs in the frozen graph, from the server: node or edge, field, A → B.
const GRAPH = "frozen graph";
function graphRows(diff) {
  if (!diff || diff.same) return [];
  const ab = (c) => `${JSON.stringify(c.a ?? null)} → ${JSON.stringify(c.b ?? null)}`;
  return [...diff.nodes_added.map((n) => [`graph: node ${n.node}`, `added (${n.type})`]),
    ...diff.nodes_removed.map((n) => [`graph: node ${n.node}`, `removed (${n.type})`]),
    ...diff.nodes_changed.map((c) => [`graph: node ${c.node}, ${c.field}`, ab(c)]),
    ...diff.edges_added.map((e) => [`graph: edge ${e}`, "added"]),
    ...diff.edges_removed.map((e) => [`graph: edge ${e}`, "removed"]),
    ...diff.edges_changed.map((c) => [`graph: edge ${c.edge}, ${c.field}`, ab(c)]),
    ...diff.graph_changed.map((c) => [`graph: ${c.field}`, ab(c)])];
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

function overallBlock(data) {
  const o = data.overall;
  if (!o || !o.n) return notice("No paired completed episodes with a success value.");
  const st = data.overall_stratified ?? {};
  const ef = data.overall_errors_as_failures ?? {};
  const errors = data.errors ?? {};
  const line = (d) => (d && isNum(d.delta) ? `${fmtPp(d.delta)} ${fmtPpInterval(d.delta_lo, d.delta_hi)}` : "–");
  return h("div", { class: "overall-diff", id: "overall-diff" },
    h("p", {}, h("span", { class: "big", id: "overall-delta" }, fmtPp(o.delta)), " B − A, pooled · ",
      h("span", { id: "overall-interval" }, `95 % interval ${fmtPpInterval(o.delta_lo, o.delta_hi)}`)),
    errors.pairs ? notice(`${errors.pairs} paired episodes have an errored episode (A: ${errors.a}, `
      + `B: ${errors.b} errors): they are not scored. Counting errors as failures: ${line(ef)}.`,
    "warning") : null,
    keyValues([
      ["paired episodes (n)", `${o.n} scored (of ${data.paired} in common)`],
      ["A success", `${fmtPct(o.a)} ${fmtInterval(...o.a_interval, fmtPct)}`],
      ["B success", `${fmtPct(o.b)} ${fmtInterval(...o.b_interval, fmtPct)}`],
      ["pooled (every scored pair)", h("span", { id: "overall-pooled" }, line(o))],
      [`stratified (${st.tasks ?? 0} tasks weighted equally)`, h("span", { id: "overall-stratified" }, line(st))],
      ["errors as failures", h("span", { id: "overall-errors-as-failures" }, line(ef))],
    ]));
}

function methodsList(methods) {
  return h("ul", { class: "methods", id: "compare-methods" },
    h("li", {}, `Success rates: ${methods.rate}.`),
    h("li", {}, `Differences (B − A): ${methods.difference}.`),
    h("li", {}, `Pooled: ${methods.pooled}. Stratified: ${methods.stratified}.`),
    h("li", {}, `p-value: ${methods.test}; ${methods.per_task}.`),
    h("li", {}, `Errors: ${methods.errors}.`),
    h("li", {}, `Units: ${methods.units}.`));
}

function mcnemarBlock(data) {
  const m = data.mcnemar;
  // The server's verdict (significant at its alpha), in words.
  const level = `${fmtNum(100 * m.alpha, 0)} % level`;
  let verdict = `The difference in success is not significant at the ${level}.`;
  if (m.a_only + m.b_only === 0) verdict = "No discordant pairs: the runs agree on every paired episode.";
  else if (m.significant) verdict = `The difference in success is significant at the ${level}.`;
  const significant = m.significant === true;
  return h("div", { id: "mcnemar" }, keyValues([
    ["paired episodes (n)", data.overall?.n ?? data.paired],
    ["A succeeded, B failed", m.a_only], ["B succeeded, A failed", m.b_only],
    ["McNemar p-value", isNum(m.p_value) ? m.p_value.toPrecision(3) : "–"],
  ]), h("p", { class: significant ? "verdict sig" : "verdict" }, `${verdict} (exact McNemar test)`));
}

function perTaskDeltas(perTask) {
  const tasks = Object.entries(perTask);
  if (!tasks.length) return [notice("No paired completed episodes.")];
  const rate = (x, interval) => `${fmtPct(x)} ${interval ? fmtInterval(...interval, fmtPct) : ""}`;
  const sign = (d) => (d < 0 ? "neg" : d > 0 ? "pos" : "");
  const pValue = (p) => (isNum(p) ? p.toPrecision(3) : "–");
  const table = dataTable("delta-table",
    ["Task", "n", "errors (A / B)", "A success", "B success", "Δ (B − A)", "Δ 95 % (Newcombe)",
      "McNemar p", "Holm-adjusted p"],
    tasks.map(([task, t]) => h("tr", { dataset: { task } }, rowHead(task), num(t.n),
      num(`${t.errors?.a ?? 0} / ${t.errors?.b ?? 0}`), num(rate(t.a, t.a_interval)),
      num(rate(t.b, t.b_interval)), h("td", { class: `num ${sign(t.delta)}` }, fmtPp(t.delta)),
      num(fmtPpInterval(t.delta_lo, t.delta_hi)), num(pValue(t.p_value)), num(pValue(t.p_holm)))),
    [1, 2, 3, 4, 5, 6, 7, 8]);
  const rows = tasks.map(([task, t]) => ({
    label: task, mean: t.delta, lo: t.delta_lo ?? t.delta, hi: t.delta_hi ?? t.delta, note: `n=${t.n}`,
  }));
  const chart = intervalChart(rows, { domain: [-1, 1], label: "success difference per task (pp)",
    format: (x) => fmtPp(x).replace(" pp", "") });
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

// Run A or B: its name (the id beside it), tags and status, what it ran and its success.
function runCard(label, summary, meta) {
  const stop = summary.stop;
  const facts = `${summary.graph_name} · ${summary.episodes_done}/${summary.episodes_total} episodes`
    + ` · success ${fmtPct(successRate(summary))}`
    + (stoppedEarly(summary) ? ` · ended by its stop rule (${stop.rule}): ${stop.decision}` : "");
  return h("div", { class: "run-card", dataset: { side: label.toLowerCase() } }, h("strong", {}, label), " ",
    runLabel({ ...meta, run_id: summary.run_id }), " ", statusBadge(summary.status),
    h("div", { class: "muted" }, facts));
}

async function compareReport(ctx, a, b, container) {
  const [data, sa, sb, ma, mb] = await Promise.all([
    api(`${API}/compare?a=${enc(a)}&b=${enc(b)}`),
    api(`${API}/status/${enc(a)}?compact=true`), api(`${API}/status/${enc(b)}?compact=true`),
    api(`${runApi(a)}/meta`).catch(() => ({})), api(`${runApi(b)}/meta`).catch(() => ({})),
  ]);
  if (!ctx.alive) return;
  const differences = [...data.config_differences];
  const graph = data.graph_differences;
  if (graph && !graph.same) differences.push(GRAPH);
  const overall = panel("Overall paired difference in success (B − A)", "overall-panel");
  const tests = panel("Paired test (McNemar, success)", "mcnemar-panel");
  const flips = panel(`Flips (${data.flips.length})`, "flips-panel");
  const deltas = panel("Per-task success differences (B − A, percentage points, 95 %)", "deltas-panel");
  overall.body.append(overallBlock(data), methodsList(data.methods));
  tests.body.append(mcnemarBlock(data));
  if (data.sequential) {
    tests.body.append(h("h3", {}, "Anytime-valid test"), sequentialVerdict(data.sequential));
  }
  flips.body.append(flipsTable(data));
  deltas.body.append(...perTaskDeltas(data.per_task));
  container.replaceChildren(caveatsBlock(data.caveats) ?? "",
    configWarning(differences, sa.config, sb.config, graphRows(graph)),
    h("div", { class: "grid two" }, runCard("A", sa, ma), runCard("B", sb, mb)),
    h("div", { class: "grid two" }, overall.el, tests.el), deltas.el, flips.el);
}

export function compareView(ctx, query) {
  const a = query.get("a") || "";
  const b = query.get("b") || "";
  const ids = (query.get("runs") || "").split(",").filter(Boolean);
  const title = () => h("h1", {}, "Compare runs");
  const picker = h("div", { class: "panel" }, title(), notice("loading runs…"));
  const board = h("details", { class: "panel", id: "leaderboard-picker-panel", open: !ids.length },
    h("summary", {}, "Leaderboard of N runs"), notice("loading runs…"));
  const report = h("div", { id: "compare-report" });
  ctx.root.append(...[picker, ids.length ? leaderboardPanel(ctx, ids, [a, b]) : null, board, report]
    .filter(Boolean));
  const hint = "Episodes are paired by (task, episode_index); only completed episodes with a success"
    + " value count.";
  api(`${API}/runs?limit=500`).then((data) => {
    if (!ctx.alive) return;
    picker.replaceChildren(title(), comparePicker(data.runs, a, b), h("p", { class: "muted" }, hint));
    board.replaceChildren(board.firstChild, leaderboardPicker(data.runs, ids));
  }).catch((err) => ctx.fail(picker, err));
  if (!a || !b) {
    report.append(notice(ids.length ? "Tick two runs in the leaderboard to pair them."
      : "Pick run A and run B, or rank several runs in a leaderboard."));
    return;
  }
  report.append(notice("comparing…"));
  compareReport(ctx, a, b, report).catch((err) => ctx.fail(report, err));
}
