// #/compare?runs=A,B,C — a leaderboard of N runs of the same task set: overall and per-task
// success with Wilson intervals, best first, each run linked; tick two to pair them.

import { API, api, enc, runHref } from "./api.js";
import { h, notice, panel, put, scroller, statusBadge } from "./dom.js";
import { fmtPct, isNum } from "./format.js";

export const compareHref = ({ runs = [], a = "", b = "" }) => {
  const parts = [];
  if (runs.length) parts.push(`runs=${runs.map(enc).join(",")}`);
  if (a) parts.push(`a=${enc(a)}`);
  if (b) parts.push(`b=${enc(b)}`);
  return `#/compare${parts.length ? `?${parts.join("&")}` : ""}`;
};

// A multi-select of runs: pick 2 or more for the leaderboard.
export function leaderboardPicker(runs, selected, label) {
  const select = h("select", { multiple: true, id: "leaderboard-runs", "aria-label": "runs to rank",
    size: 8 }, runs.map((r) => label(r)));
  for (const opt of select.options) opt.selected = selected.includes(opt.value);
  const form = h("form", { class: "leaderboard-picker", id: "leaderboard-form" }, select,
    h("div", {}, h("button", { type: "submit", class: "primary", text: "Rank selected runs" }),
      h("span", { class: "muted" }, " (Ctrl/⌘-click to pick several)")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const ids = [...select.selectedOptions].map((o) => o.value);
    location.hash = compareHref({ runs: ids });
  });
  return form;
}

// Success over scored episodes, with what it covers and what the errors could change.
function rateCell(rate) {
  if (!rate || (!rate.n && !rate.errors)) return h("td", { class: "num rate" }, "–");
  const ci = isNum(rate.lo) ? `[${fmtPct(rate.lo)}, ${fmtPct(rate.hi)}]` : "";
  const planned = isNum(rate.n_planned) ? ` of ${rate.n_planned}` : "";
  return h("td", { class: `num rate${rate.errors ? " has-errors" : ""}`, dataset: { errors: String(rate.errors ?? 0) } },
    fmtPct(rate.rate),
    h("span", { class: "ci" }, `${ci} n=${rate.n}${planned}`),
    rate.errors ? h("span", { class: "ci errors" }, `${rate.errors} errors · ${fmtPct(rate.errors_as_failures)}`
      + ` with errors as failures · worst–best ${fmtPct(rate.worst)}–${fmtPct(rate.best)}`) : null);
}

function leaderboardTable(data, ids, pair) {
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
    const box = h("input", { type: "checkbox", value: r.run_id, "aria-label": `pair ${r.run_id}`,
      checked: pair.includes(r.run_id), onchange: sync });
    checks.push(box);
    return h("tr", { dataset: { runId: r.run_id, rank: r.rank } }, h("td", { class: "pick" }, box),
      h("td", { class: "num" }, String(r.rank)),
      h("th", { scope: "row" }, h("a", { href: runHref(r.run_id), text: r.run_id }), " ",
        statusBadge(r.status), r.errors ? h("span", { class: "badge st-failed run-errors" }, `${r.errors} errors`) : null,
        h("span", { class: "ci" }, `${r.graph_name} · seed ${r.config.seed}`
          + ` · step budget ${r.config.step_budget ?? "graph"}`)),
      rateCell(r.overall), data.tasks.map((t) => rateCell(r.per_task[t])));
  });
  sync();
  const table = h("table", { class: "data", id: "leaderboard-table" }, head, h("tbody", {}, rows));
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
      : notice("These runs do not share one task set.", "warning"), leaderboardTable(data, ids, pair));
  }).catch((err) => ctx.fail(board.body, err));
  return board.el;
}

