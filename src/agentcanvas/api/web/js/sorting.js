// Sorting of table rows on the page: numbers by value, text by locale, missing values last
// in either direction, ties in their given order (stable). Pure: tested by Node (tests/js).

import { isNum } from "./format.js";

const missing = (v) => v === null || v === undefined || v === "" || (typeof v === "number" && !isNum(v));

// Numbers before text; two numbers by value, two texts by locale (numeric-aware).
function compareValues(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "number") return -1;
  if (typeof b === "number") return 1;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

// `items` ordered by `valueOf(item)`, "asc" or "desc"; a new array. Missing values (null,
// undefined, "", NaN) go last whichever the direction; equal values keep their order.
export function sortRows(items, valueOf, dir = "asc") {
  const sign = dir === "desc" ? -1 : 1;
  const keyed = items.map((item, index) => ({ item, index, value: valueOf(item) }));
  keyed.sort((x, y) => {
    const [mx, my] = [missing(x.value), missing(y.value)];
    if (mx || my) return mx === my ? x.index - y.index : mx ? 1 : -1;
    return sign * compareValues(x.value, y.value) || x.index - y.index;
  });
  return keyed.map((k) => k.item);
}

// ["key", "asc"] of a "key:asc" sort (a key may itself hold ":").
export function parseSort(sort) {
  const at = (sort || "").lastIndexOf(":");
  return at < 0 ? [sort || "", "asc"] : [sort.slice(0, at), sort.slice(at + 1)];
}

// "key:asc" → "key:desc" on a second click of the same key; a new key starts `first`.
export function nextSort(sort, key, first = "asc") {
  const [current, order] = parseSort(sort);
  if (current !== key) return `${key}:${first}`;
  return `${key}:${order === "asc" ? "desc" : "asc"}`;
}
