// A histogram's bars carry their counts and ranges; labels under the axis never overlap.
import assert from "node:assert/strict";
import { test } from "node:test";

import { axisLabels, fmtTick, histogramBars } from "../../src/agentcanvas/api/web/js/histogram_axis.js";

const noOverlap = (labels) => labels.slice(1).every((l, i) => l.x - labels[i].x >= l.text.length * 6);

test("whole-number bins of width one are labelled by their value, under each bar", () => {
  const hist = { edges: [3, 4, 5, 6, 7], counts: [2, 1, 0, 1] };
  const bars = histogramBars(hist, { width: 208, pad: 4 });
  assert.deepEqual(bars.map((b) => [b.count, b.range]), [[2, "3"], [1, "4"], [0, "5"], [1, "6"]]);
  assert.deepEqual(bars.map((b) => b.x), [4, 54, 104, 154]);
  const labels = axisLabels(hist, { width: 208, pad: 4 });
  assert.deepEqual(labels.map((l) => [l.text, l.x]), [["3", 29], ["4", 79], ["5", 129], ["6", 179]]);
});

test("wider bins show their range, and edges label the boundaries, first and last kept", () => {
  const hist = { edges: [0, 5, 10, 15], counts: [4, 0, 9] };
  assert.deepEqual(histogramBars(hist, { width: 300 }).map((b) => b.range), ["0–4", "5–9", "10–14"]);
  const floats = { edges: [0, 0.25, 0.5, 0.75, 1], counts: [1, 2, 3, 4] };
  assert.equal(histogramBars(floats, { width: 200 })[1].range, "0.25–0.5");
  const labels = axisLabels(floats, { width: 200 });
  assert.deepEqual(labels.map((l) => l.text), ["0", "0.25", "0.5", "0.75", "1"]);
  assert.deepEqual(labels.map((l) => l.anchor), ["start", "middle", "middle", "middle", "end"]);
});

test("crowded labels are thinned to every k-th, never overlapping, the last always shown", () => {
  const edges = Array.from({ length: 13 }, (_, i) => 1000 + 37.5 * i);
  const hist = { edges, counts: Array(12).fill(1) };
  const labels = axisLabels(hist, { width: 248, pad: 6 });
  assert.ok(labels.length < 13 && labels.length >= 2, labels.map((l) => l.text).join());
  assert.equal(labels[0].text, fmtTick(edges[0]));
  assert.equal(labels.at(-1).text, fmtTick(edges[12]));
  assert.ok(noOverlap(labels), labels.map((l) => `${l.text}@${l.x}`).join());
  const unit = { edges: Array.from({ length: 13 }, (_, i) => 100 + i), counts: Array(12).fill(1) };
  assert.ok(noOverlap(axisLabels(unit, { width: 120 })));
});
