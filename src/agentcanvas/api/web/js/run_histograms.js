// Per task: histograms of graph steps and return over completed episodes (GET …/distributions).

import { runApi } from "./api.js";
import { dataTable, h, notice, rowHead } from "./dom.js";
import { histogramChart } from "./charts.js";

export function histogramBlock(data) {
  const tasks = Object.entries(data?.tasks ?? {});
  if (!tasks.length) return notice("No completed episodes to draw.");
  const cell = (hist, label) => h("td", { class: "hist" }, histogramChart(hist, { label }));
  return h("div", { class: "table-wrap" }, dataTable("histogram-table",
    ["Task", "Graph steps", "Return"],
    tasks.map(([task, d]) => h("tr", { dataset: { task } }, rowHead(task),
      cell(d.steps, `graph steps of ${task}`), cell(d.return, `return of ${task}`)))));
}

export const distributionsUrl = (runId) => `${runApi(runId)}/distributions`;
