// Column headers that sort a table held whole on the page (per-task rows, a leaderboard):
// click a header to sort by it, again to reverse. Numbers by value, missing values last,
// ties in the table's own order (sorting.js). A cell sorts by its data-sort value when it has
// one (a rate's number, not its text), else by its text.

import { h } from "./dom.js";
import { isNum } from "./format.js";
import { nextSort, parseSort, sortRows } from "./sorting.js";

function cellValue(cell) {
  if (!cell) return null;
  const raw = cell.dataset.sort ?? cell.textContent.trim();
  if (raw === "" || raw === "–") return null;
  const number = Number(raw);
  return isNum(number) ? number : raw;
}

// Makes the columns of `table` named in `keys` (one key or null per column) sortable; the
// sort ("key:asc") is kept in `state.sort`, so that a table rebuilt by a live update keeps it.
// `first` is the direction of a first click (numbers: "desc", best first).
export function makeSortable(table, keys, state, first = {}) {
  const heads = [...table.tHead.rows[0].cells];
  const rows = [...table.tBodies[0].rows];
  const apply = () => {
    const [key, dir] = parseSort(state.sort);
    const column = keys.indexOf(key);
    const sorted = column < 0 ? rows : sortRows(rows, (tr) => cellValue(tr.cells[column]), dir);
    table.tBodies[0].append(...sorted);
    heads.forEach((th, i) => {
      if (keys[i] === null || keys[i] === undefined) return;
      const on = keys[i] === key;
      th.setAttribute("aria-sort", on ? `${dir}ending` : "none");
      const mark = th.querySelector(".sort-mark");
      if (mark) mark.textContent = on ? (dir === "asc" ? " ▲" : " ▼") : "";
    });
  };
  heads.forEach((th, i) => {
    const key = keys[i];
    if (key === null || key === undefined) return;
    const button = h("button", { type: "button", class: "sort", dataset: { sort: key },
      title: "sort by this column (again: reverse)" }, ...th.childNodes, h("span", { class: "sort-mark" }));
    button.addEventListener("click", () => {
      state.sort = nextSort(state.sort, key, first[key] ?? "asc");
      apply();
    });
    th.replaceChildren(button);
  });
  apply();
  return table;
}
