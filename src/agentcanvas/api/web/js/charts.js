// SVG charts: bars with whiskers for intervals, and small histograms.

import { svg } from "./dom.js";
import { clamp, fmtInterval, fmtNum, isNum, truncate } from "./format.js";
import { axisLabels, fmtTick, histogramBars } from "./histogram_axis.js";

// A horizontal bar per row with a whisker for its interval: [{label, mean, lo, hi, note}].
export function intervalChart(rows, { domain, label, format = fmtNum, base = 0 }) {
  const W = 680, LABEL_W = 210, VALUE_W = 150, ROW_H = 26, TOP = 6;
  const plotW = W - LABEL_W - VALUE_W;
  const [min, max] = domain;
  const x = (v) => LABEL_W + ((clamp(v, min, max) - min) / (max - min || 1)) * plotW;
  const height = TOP + rows.length * ROW_H + 24;
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${height}`, width: W,
    role: "img", "aria-label": label });
  const bottom = TOP + rows.length * ROW_H;
  chart.append(svg("line", { class: "axis", x1: x(base), x2: x(base), y1: TOP, y2: bottom }));
  for (const tick of [min, base, max].filter((t, i, all) => all.indexOf(t) === i)) {
    chart.append(svg("text", { class: "tick", x: x(tick), y: bottom + 16, "text-anchor": "middle" },
      format(tick)));
  }
  rows.forEach((row, i) => chart.append(chartRow(row, TOP + i * ROW_H, ROW_H, x, base, format)));
  return chart;
}

function chartRow(row, y, rowH, x, base, format) {
  const group = svg("g", { class: "chart-row" });
  const mid = y + rowH / 2;
  const value = `${format(row.mean)} ${fmtInterval(row.lo, row.hi, format)}`;
  group.append(svg("title", {}, `${row.label}: ${value}${row.note ? ` · ${row.note}` : ""}`));
  group.append(svg("text", { class: "label", x: 202, y: mid + 4, "text-anchor": "end" },
    truncate(row.label, 30)));
  if (isNum(row.mean)) {
    const x0 = x(base), x1 = x(row.mean);
    group.append(svg("rect", { class: row.mean < base ? "bar neg" : "bar", x: Math.min(x0, x1),
      y: y + 5, width: Math.max(1, Math.abs(x1 - x0)), height: rowH - 10 }));
  }
  if (isNum(row.lo) && isNum(row.hi)) {
    const [a, b] = [x(row.lo), x(row.hi)];
    group.append(svg("path", { class: "whisker",
      d: `M${a},${mid} H${b} M${a},${mid - 6} V${mid + 6} M${b},${mid - 6} V${mid + 6}` }));
  }
  group.append(svg("text", { class: "value", x: 540, y: mid + 4 }, value));
  return group;
}

export function chartDomain(rows) {
  const values = rows.flatMap((r) => [r.mean, r.lo, r.hi]).filter(isNum);
  if (values.every((v) => v >= 0 && v <= 1)) return [0, 1];
  const lo = Math.min(0, ...values), hi = Math.max(0, ...values);
  return lo === hi ? [lo, lo + 1] : [lo, hi];
}

// A small histogram from the server's {edges, counts, n, mean}: one bar per bin with its
// count above it, the bins' values (or edges) under the axis, the mean and n below; each
// bar's range and count as its tooltip.
export function histogramChart(hist, { label, format = fmtTick }) {
  const W = 260, H = 112, PAD = 6, TOP = 14, BOTTOM = 34;
  const chart = svg("svg", { class: "chart histogram", viewBox: `0 0 ${W} ${H}`, width: W,
    role: "img", "aria-label": label, "data-n": hist?.n ?? 0 });
  if (!hist) {
    chart.append(svg("text", { class: "tick", x: W / 2, y: H / 2, "text-anchor": "middle" }, "no data"));
    return chart;
  }
  const peak = Math.max(...hist.counts, 1);
  const plotH = H - TOP - BOTTOM;
  const axis = TOP + plotH;
  for (const bar of histogramBars(hist, { width: W, pad: PAD, format })) {
    const height = (bar.count / peak) * plotH;
    const mid = bar.x + bar.width / 2;
    chart.append(svg("rect", { class: "bar", x: bar.x + 1, y: axis - height,
      width: Math.max(1, bar.width - 2), height: Math.max(bar.count ? 1 : 0, height),
      "data-count": bar.count, "data-range": bar.range }, svg("title", {}, `${bar.range}: ${bar.count}`)));
    if (bar.count) {
      chart.append(svg("text", { class: "count", x: mid, y: axis - height - 3, "text-anchor": "middle" },
        String(bar.count)));
    }
  }
  chart.append(svg("line", { class: "axis", x1: PAD, x2: W - PAD, y1: axis, y2: axis }));
  for (const tick of axisLabels(hist, { width: W, pad: PAD, format })) {
    chart.append(svg("text", { class: "tick bin", x: tick.x, y: axis + 13, "text-anchor": tick.anchor },
      tick.text));
  }
  chart.append(svg("text", { class: "tick", x: W / 2, y: axis + 28, "text-anchor": "middle" },
    `mean ${fmtNum(hist.mean)} · n ${hist.n}`));
  return chart;
}
