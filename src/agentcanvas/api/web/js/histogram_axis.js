// Where a histogram's bars and labels go: each bar with its count and its range, and the
// labels under the axis — each bar's value when every bin holds one whole number, else the bin
// edges — every k-th of them so that no two overlap. Pure: tested by Node (tests/js).

import { fmtSig } from "./format.js";

const CHAR_PX = 6.2; // width of a digit in the chart's tick font, with some room
const LABEL_GAP_PX = 4;

// A tick's text: whole numbers as they are, others to three significant figures.
export const fmtTick = (x) => (Number.isInteger(x) ? String(x) : fmtSig(x));

// The bars of the server's {edges, counts} across `width` (less `pad` on each side).
export function histogramBars(hist, { width, pad = 0, format = fmtTick }) {
  const barW = (width - 2 * pad) / hist.counts.length;
  return hist.counts.map((count, i) => {
    const [lo, hi] = [hist.edges[i], hist.edges[i + 1]];
    return { x: pad + i * barW, width: barW, count, lo, hi, range: binRange(lo, hi, format) };
  });
}

// Whether each bin holds exactly one whole number (edges k, k + 1, …).
const unitBins = (edges) => edges.every((e) => Number.isInteger(e))
  && edges.slice(1).every((e, i) => e - edges[i] === 1);

// "3" for the bin [3, 4) of whole numbers, "3–4" for [3, 5), "0.25–0.5" for floats.
function binRange(lo, hi, format) {
  if (Number.isInteger(lo) && Number.isInteger(hi)) {
    return hi - lo === 1 ? format(lo) : `${format(lo)}–${format(hi - 1)}`;
  }
  return `${format(lo)}–${format(hi)}`;
}

// Indices 0, k, 2k, … of `n` labels `spacing` px apart, each at most `widest` px wide, so that
// no two overlap; the last label is always kept (the one before it dropped if too close).
function spacedIndices(n, spacing, widest) {
  const k = Math.max(1, Math.ceil((widest + LABEL_GAP_PX) / Math.max(spacing, 1e-9)));
  const picked = [];
  for (let i = 0; i < n; i += k) picked.push(i);
  if (picked[picked.length - 1] !== n - 1) {
    if (picked.length > 1 && n - 1 - picked[picked.length - 1] < k) picked.pop();
    picked.push(n - 1);
  }
  return picked;
}

// The labels under the axis: [{x, text, anchor}] (anchor: start, middle or end).
export function axisLabels(hist, { width, pad = 0, format = fmtTick }) {
  const n = hist.counts.length;
  const barW = (width - 2 * pad) / n;
  const widthOf = (text) => text.length * CHAR_PX;
  if (unitBins(hist.edges)) {
    const texts = hist.counts.map((_, i) => format(hist.edges[i]));
    const widest = Math.max(...texts.map(widthOf));
    return spacedIndices(n, barW, widest).map((i) =>
      ({ x: pad + (i + 0.5) * barW, text: texts[i], anchor: "middle" }));
  }
  const texts = hist.edges.map(format);
  const widest = Math.max(...texts.map(widthOf));
  return spacedIndices(n + 1, barW, widest).map((i) => ({
    x: pad + i * barW, text: texts[i], anchor: i === 0 ? "start" : i === n ? "end" : "middle",
  }));
}
