// Number, time and text formatting for display; "–" stands for a missing value. Pure: no DOM,
// so that Node can test it (tests/js).

export function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}

export function fmtNum(x, digits = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "boolean") return x ? "1" : "0";
  if (typeof x !== "number") return String(x);
  if (!Number.isFinite(x)) return "–";
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

export function fmtPct(x) {
  return isNum(x) ? `${(100 * x).toFixed(1)} %` : "–";
}

export function fmtInterval(lo, hi, fmt = fmtNum) {
  return isNum(lo) && isNum(hi) ? `[${fmt(lo)}, ${fmt(hi)}]` : "–";
}

export function fmtDuration(seconds) {
  if (!isNum(seconds) || seconds < 0) return "–";
  if (seconds < 10) return `${seconds.toFixed(seconds < 1 ? 2 : 1)} s`;
  const whole = Math.round(seconds);
  if (whole < 60) return `${whole} s`;
  const m = Math.floor(whole / 60);
  if (m < 60) return `${m} min ${String(whole % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

export function fmtTime(epochS) {
  return isNum(epochS) ? new Date(epochS * 1000).toLocaleString() : "–";
}

export function truncate(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function clamp(x, lo, hi) {
  return Math.min(hi, Math.max(lo, x));
}

// Differences of rates in percentage points, signed: +12.5 pp.
export function fmtPp(x) {
  if (!isNum(x)) return "–";
  const pp = 100 * x;
  return `${pp > 0 ? "+" : pp < 0 ? "−" : "±"}${Math.abs(pp).toFixed(1)} pp`;
}

export function fmtPpInterval(lo, hi) {
  return isNum(lo) && isNum(hi) ? `[${fmtPp(lo)}, ${fmtPp(hi)}]` : "–";
}

// Three significant figures, without trailing zeros: 26.8, 20, 0.00123.
export function fmtSig(x) {
  return isNum(x) ? String(Number(x.toPrecision(3))) : "–";
}
