// #/compare?runs=A,B,C — a leaderboard of N runs of the same task set: overall and per-task
// success with Wilson intervals, best first, each run by its name and linked; tick two to pair
// them. Runs are picked with checkboxes.

import { API, api, enc } from "./api.js";
import { h, notice, panel, put, scroller, statusBadge } from "./dom.js";
import { fmtPct, isNum } from "./format.js";
import { runLabel, tagChip } from "./run_rows.js";
import { makeSortable } from "./sortable.js";
import { compareHref } from "./url_state.js";

// A run as the pickers show it: its name (or id), the id beside a name, its tags, and what
// it is (graph, status, success).
export function runChoice(r) {
  return h("span", { class: "run-label", title: r.run_id },
    h("strong", { class: "run-name" }, r.name || r.run_id),
    r.name ? h("small", { class: "run-id" }, r.run_id) : null,
    r.tags?.length ? h("span", { class: "tags" }, r.tags.map((t) => tagChip(t))) : null,
    h("small", { class: "muted" }, `${r.graph_name ?? "–"} · ${r.status} · success ${fmtPct(r.success_rate)}`));
}

// Checkboxes of runs (touch-friendly): tick 2 or more to rank them in a leaderboard. Runs
// picked in the URL but not listed (older than the listing) stay ticked, by id.
export function leaderboardPicker(runs, selected) {
  const listed = new Set(runs.map((r) => r.run_id));
  const entries = [...runs, ...selected.filter((id) => !listed.has(id)).map((id) => ({ run_id: id }))];
  const boxes = entries.map((r) => h("input", { type: "checkbox", name: "runs", value: r.run_id,
    checked: selected.includes(r.run_id), "aria-label": `rank ${r.name || r.run_id}` }));
  const submit = h("button", { type: "submit", class: "primary", id: "leaderboard-rank" });
  const picked = () => boxes.filter((b) => b.checked).map((b) => b.value);
  const sync = () => {
    const n = picked().length;
    submit.disabled = n < 2;
    submit.textContent = n < 2 ? "Tick 2 or more runs to rank" : `Rank ${n} runs`;
  };
  const list = h("ul", { class: "pick-list", id: "leaderboard-runs" }, entries.map((r, i) =>
    h("li", { dataset: { runId: r.run_id } },
      h("label", { class: "pick-run" }, boxes[i], r.status ? runChoice(r) : h("code", {}, r.run_id)))));
  const form = h("form", { class: "leaderboard-picker", id: "leaderboard-form" }, list,
    h("div", { class: "form-actions" }, submit));
  form.addEventListener("change", sync);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = compareHref({ runs: picked() });
  });
  sync();
  return form;
}

// Success over scored episodes, with what it covers and what the errors could change.
function rateCell(rate, label) {
  if (!rate || (!rate.n && !rate.errors)) return h("td", { class: "num rate", "data-label": label }, "–");
  const ci = isNum(rate.lo) ? `[${fmtPct(rate.lo)}, ${fmtPct(rate.hi)}]` : "";
  const planned = isNum(rate.n_planned) ? ` of ${rate.n_planned}` : "";
  return h("td", { class: `num rate${rate.errors ? " has-errors" : ""}`, "data-label": label,
    dataset: { errors: String(rate.errors ?? 0), sort: isNum(rate.rate) ? String(rate.rate) : "" } },
    fmtPct(rate.rate),
    h("span", { class: "ci" }, `${ci} n=${rate.n}${planned}`),
    rate.errors ? h("span", { class: "ci errors" }, `${rate.errors} errors · ${fmtPct(rate.errors_as_failures)}`
      + ` with errors as failures · worst–best ${fmtPct(rate.worst)}–${fmtPct(rate.best)}`) : null);
}

// The ranked runs, best first; every column sorts (a rate's first click: highest first).
function leaderboardTable(data, ids, pair, state) {
  const checks = [];
  const compareButton = h("button", { type: "button", id: "leaderboard-pair", disabled: true,
    text: "Pair the two ticked runs" });
  const ticked = () => checks.filter((c) => c.checked).map((c) => c.value);
  const sync = () => { compareButton.disabled = ticked().length !== 2; };
  compareButton.addEventListener("click", () => {
    const [a, b] = ticked();
    location.hash = compareHref({ runs: ids, a, b });
  });
  const head = h("thead", {}, h("tr", {}, h("th", { class: "pick", scope: "col" }, "pair"),
    h("th", { scope: "col", class: "num" }, "#"), h("th", { scope: "col" }, "Run"),
    h("th", { scope: "col", class: "num" }, "Overall success"),
    data.tasks.map((t) => h("th", { scope: "col", class: "num" }, t))));
  const rows = data.runs.map((r) => {
    const box = h("input", { type: "checkbox", value: r.run_id, "aria-label": `pair ${r.name || r.run_id}`,
      checked: pair.includes(r.run_id), onchange: sync });
    checks.push(box);
    return h("tr", { dataset: { runId: r.run_id, rank: r.rank } }, h("td", { class: "pick" }, box),
      h("td", { class: "num rank" }, String(r.rank)),
      h("th", { scope: "row", class: "run", dataset: { sort: r.name || r.run_id } }, runLabel(r), " ",
        statusBadge(r.status), r.errors ? h("span", { class: "badge st-failed run-errors" }, `${r.errors} errors`) : null,
        h("span", { class: "ci" }, `${r.graph_name} · seed ${r.config.seed}`
          + ` · step budget ${r.config.step_budget ?? "graph"}`)),
      rateCell(r.overall, "overall success"), data.tasks.map((t) => rateCell(r.per_task[t], t)));
  });
  sync();
  const table = h("table", { class: "data", id: "leaderboard-table" }, head, h("tbody", {}, rows));
  const rates = ["overall", ...data.tasks.map((t) => `task.${t}`)];
  makeSortable(table, [null, "rank", "run", ...rates], state,
    Object.fromEntries(rates.map((k) => [k, "desc"])));
  return [scroller(table), h("div", { class: "toolbar" }, compareButton)];
}

function methodsNote(data) {
  const scope = data.same_task_set ? "every run has the same tasks"
    : `task sets differ: the overall rate counts only the tasks all runs share (${data.common_tasks.join(", ") || "none"})`;
  return h("p", { class: "muted", id: "leaderboard-methods" },
    `Rank: ${data.rank_rule ?? "overall success rate"}; ${scope}. Rates in %, intervals: `
    + `${data.methods.rate}; the rate is over scored (completed) episodes (n of planned), its errors beside it.`);
}

export function leaderboardPanel(ctx, ids, pair) {
  const board = panel(`Leaderboard (${ids.length} runs)`, "leaderboard-panel");
  put(board.body, notice("ranking…"));
  api(`${API}/leaderboard?runs=${ids.map(enc).join(",")}`).then((data) => {
    if (!ctx.alive) return;
    put(board.body, methodsNote(data), data.same_task_set ? null
      : notice("These runs do not share one task set.", "warning"), leaderboardTable(data, ids, pair, { sort: "" }));
  }).catch((err) => ctx.fail(board.body, err));
  return board.el;
}

