// Sorting table rows: numbers by value, missing last either way, ties in their order.
import assert from "node:assert/strict";
import { test } from "node:test";

import { nextSort, parseSort, sortRows } from "../../src/agentcanvas/api/web/js/sorting.js";

const rows = [
  { id: "a", v: 10 }, { id: "b", v: null }, { id: "c", v: 9 }, { id: "d", v: 10 },
  { id: "e", v: NaN }, { id: "f", v: -1 }, { id: "g", v: 100 },
];
const ids = (list) => list.map((r) => r.id).join("");

test("numbers sort by value, not as text (9 < 10 < 100)", () => {
  assert.equal(ids(sortRows(rows, (r) => r.v, "asc")), "fcadgbe");
  assert.equal(ids(sortRows(rows, (r) => r.v, "desc")), "gadcfbe");
});

test("equal values keep their order in both directions (stable)", () => {
  const asc = ids(sortRows(rows, (r) => r.v, "asc"));
  const desc = ids(sortRows(rows, (r) => r.v, "desc"));
  assert.ok(asc.indexOf("a") < asc.indexOf("d") && desc.indexOf("a") < desc.indexOf("d"));
});

test("text sorts by locale with numbers inside it in order; the input is left alone", () => {
  const tasks = ["task-10", "task-9", "Alpha"].map((t) => ({ t }));
  assert.deepEqual(sortRows(tasks, (r) => r.t).map((r) => r.t), ["Alpha", "task-9", "task-10"]);
  assert.deepEqual(tasks.map((r) => r.t), ["task-10", "task-9", "Alpha"]);
});

test("a header clicked twice reverses; another header starts in its first direction", () => {
  assert.equal(nextSort("", "index"), "index:asc");
  assert.equal(nextSort("index:asc", "index"), "index:desc");
  assert.equal(nextSort("index:desc", "index"), "index:asc");
  assert.equal(nextSort("index:asc", "metric.success", "desc"), "metric.success:desc");
  assert.deepEqual(parseSort("metric.a:b:desc"), ["metric.a:b", "desc"]);
  assert.deepEqual(parseSort(""), ["", "asc"]);
});
