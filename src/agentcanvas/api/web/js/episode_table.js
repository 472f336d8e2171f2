// The run page's episode table: filtered, sorted and paginated on the server.

import { episodeHref, latestGet, runApi } from "./api.js";
import { fillRows, h, num, option, panel, scroller, statusBadge } from "./dom.js";
import { whyText } from "./failure_words.js";
import { fmtNum, truncate } from "./format.js";
import { PAGE_SIZE, pagerBar } from "./pager.js";
import { nextSort, parseSort } from "./sorting.js";

const EPISODES_REFRESH_MS = 1000;
const EPISODE_STATUSES = ["completed", "timeout", "exception", "error", "no_verdict", "cancelled"];

// Why the record's steps and an env's `steps` metric differ by one.
export const STEPS_NOTE = "Graph steps: iterations of the graph, the first of which observes the "
  + "reset state before any action. An env's own “steps” metric counts actions, so it is one "
  + "less when the agent acts from the second iteration on (the step budget counts iterations).";

// The server's outcome of an episode (its `outcome`: success, failure, error, cancelled, or
// null for a completed episode without a success metric) as [text, kind].
export function episodeOutcome(e) {
  return e.outcome ? [e.outcome, e.outcome] : ["–", "none"];
}

const UNSCORED = "not scored: the episode did not complete (its values are where it stopped)";

// Metrics of an episode the server did not score (an error, a cancelled episode) are greyed:
// no aggregate counts them; a cancelled episode's note is not an error.
function episodeRow(runId, e, metrics) {
  const [outcome, kind] = episodeOutcome(e);
  const scored = kind !== "error" && kind !== "cancelled";
  const metricCell = (m) => (scored ? num(fmtNum(e.metrics?.[m]))
    : h("td", { class: "num muted", title: UNSCORED }, fmtNum(e.metrics?.[m])));
  // Why it ended, from the record's fields: the failing node's own message, the end reason.
  const why = whyText(e);
  const noteClass = kind === "error" ? "error-text" : "note-text muted";
  return h("tr", { dataset: { index: e.index, outcome: kind, endReason: e.end_reason ?? "" } },
    num(h("a", { href: episodeHref(runId, e.index), text: e.index })),
    h("td", {}, e.task), num(e.episode_index),
    h("td", {}, statusBadge(e.status)), h("td", { class: `outcome ${kind}` }, outcome),
    num(e.steps), metrics.map(metricCell), num(e.attempts ?? 1),
    h("td", { class: why ? noteClass : undefined, title: why }, why ? truncate(why, WHY_CHARS) : ""));
}

const WHY_CHARS = 120;

const OUTCOME_FILTERS = [
  ["outcome:success", "successes"],
  ["outcome:failure", "task failures (success 0)"],
  ["outcome:error", "errors (not completed)"],
  ["outcome:cancelled", "cancelled (run stopped)"],
];

// Index, task, status, graph steps and every metric sort (on the server, over all pages).
function episodeHead(sort, metrics, sortBy) {
  const [current, order] = parseSort(sort);
  const plain = (label) => h("th", { scope: "col" }, label);
  const sortable = (key, label, title) => {
    const sorted = current === key;
    return h("th", { scope: "col", title, "aria-sort": sorted ? `${order}ending` : "none" },
      h("button", { type: "button", class: "sort", "data-sort": key, onclick: () => sortBy(key) },
        label, sorted ? (order === "asc" ? " ▲" : " ▼") : ""));
  };
  const label = (m) => (m === "steps" ? "steps (env actions)" : m);
  // the server sorts by a metric named in up to 64 characters, none of them ":"
  const metricHead = (m) => (/^[^:]{1,64}$/.test(m)
    ? sortable(`metric.${m}`, label(m), m === "steps" ? STEPS_NOTE : undefined)
    : h("th", { scope: "col", title: m === "steps" ? STEPS_NOTE : undefined }, label(m)));
  return h("tr", {}, sortable("index", "Index"), sortable("task", "Task"), plain("Ep. #"),
    sortable("status", "Status"), plain("Outcome"), sortable("steps", "Graph steps"),
    metrics.map(metricHead), plain("Attempts"), plain("Why it ended"));
}

function taskFilter(onChange) {
  const select = h("select", { id: "episode-task", "aria-label": "filter episodes by task" },
    option("", "all tasks"));
  select.addEventListener("change", () => onChange(select.value));
  return {
    el: select,
    setTasks(tasks) {
      if (JSON.stringify(tasks) === select.dataset.tasks) return;
      const current = select.value;
      select.dataset.tasks = JSON.stringify(tasks);
      select.replaceChildren(option("", "all tasks"), ...tasks.map((t) => option(t)));
      select.value = tasks.includes(current) ? current : "";
    },
  };
}

// `onCount(total)` is called with the unfiltered count of every load, in the same task that
// writes the heading, so that a run page can keep its progress in step with the table.
export function episodeTable(ctx, runId, onCount = () => {}) {
  const get = latestGet(ctx);
  const state = { offset: 0, filter: "", task: "", sort: "index:asc", metrics: [] };
  const { el, body, heading } = panel("Episodes", "episodes-panel");
  const thead = h("thead");
  const tbody = h("tbody");
  const pager = pagerBar((offset) => { state.offset = offset; load(); });
  const filter = h("select", { id: "episode-filter", "aria-label": "filter episodes" },
    option("", "all episodes"),
    h("optgroup", { label: "outcome" }, OUTCOME_FILTERS.map(([value, text]) => option(value, text))),
    h("optgroup", { label: "status" }, EPISODE_STATUSES.map((s) => option(`status:${s}`, s))));
  filter.addEventListener("change", () => show(filter.value));
  const tasks = taskFilter((task) => { Object.assign(state, { task, offset: 0 }); load(); });
  const note = h("p", { class: "muted steps-note", id: "steps-note" }, STEPS_NOTE);
  body.append(h("div", { class: "toolbar" }, tasks.el, filter, pager.el),
    scroller(h("table", { class: "data", id: "episode-table" }, thead, tbody)), note);
  function show(value) {
    Object.assign(state, { filter: value, offset: 0 });
    filter.value = value;
    load();
  }
  function sortBy(key) {
    state.sort = nextSort(state.sort, key, key.startsWith("metric.") ? "desc" : "asc");
    state.offset = 0;
    load();
  }
  async function load() {
    const query = new URLSearchParams({ offset: state.offset, limit: PAGE_SIZE, sort: state.sort });
    const [kind, value] = state.filter.split(":");
    if (value) query.set(kind, value);
    if (state.task) query.set("task", state.task);
    const data = await get(`${runApi(runId)}/episodes?${query}`);
    if (!data) return;
    note.hidden = !state.metrics.includes("steps");
    thead.replaceChildren(episodeHead(state.sort, state.metrics, sortBy));
    fillRows(tbody, data.episodes.map((e) => episodeRow(runId, e, state.metrics)),
      8 + state.metrics.length, "No episodes match.");
    pager.update(state.offset, data.episodes.length, data.total);
    const filters = [state.task, state.filter].filter(Boolean).join(", ");
    heading.textContent = `Episodes (${data.total}${filters ? ` matching ${filters}` : ""})`;
    heading.dataset.total = String(data.total);
    if (!filters) onCount(data.total);
  }
  const refresh = ctx.throttle(() => load().catch((err) => ctx.fail(tbody, err)), EPISODES_REFRESH_MS);
  return {
    el, load, refresh, show,
    setMetrics: (names) => { state.metrics = names; },
    setTasks: (names) => tasks.setTasks(names),
    showTask: (task) => { tasks.el.value = task; Object.assign(state, { task, offset: 0 }); load(); },
  };
}
