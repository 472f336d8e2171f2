// What a run's compact summary says, as numbers and words for the page: progress counts,
// success with its interval and coverage, the health verdict, the ETA. Every verdict and
// count is the server's (summary.health, status_counts, aggregate_metrics); this module only
// words them. Pure: no DOM, so that Node can test it (tests/js).

import { fmtDuration, fmtInterval, fmtPct, isNum } from "./format.js";

export const ACTIVE = new Set(["pending", "queued", "running"]);
export const RESUMABLE = new Set(["aborted", "cancelled", "failed"]);

// The server's count of episodes that ended in error (health.error_count).
export function errorCount(summary) {
  return summary.health?.error_count ?? 0;
}

// The summary's episodes_done counts the episodes that ended; those recorded as cancelled (in
// flight when the run was cancelled) are not in it, only in status_counts.
export function progressCounts(summary) {
  const total = summary.episodes_total || 0;
  const cancelled = summary.status_counts?.cancelled ?? 0;
  const done = Math.max(0, summary.episodes_done || 0);
  return { total, cancelled, done, errors: Math.min(errorCount(summary), done) };
}

// Whether nothing is left to run (a resume would have nothing to do).
export function allEpisodesEnded(summary) {
  const { total, done } = progressCounts(summary);
  return total > 0 && done >= total;
}

// Whether the run can be resumed: it ended early (its status says so) with episodes left.
export function canResume(summary) {
  return RESUMABLE.has(summary.status) && !allEpisodesEnded(summary);
}

// A completed run that its stop rule ended before its cap: the rest of the plan was not needed.
export function stoppedEarly(summary) {
  return summary.status === "completed" && summary.stop?.decided === true;
}

// Episodes of the plan a stop rule made unnecessary (0 for any other run).
export function notNeeded(summary) {
  if (!stoppedEarly(summary)) return 0;
  return Math.max(0, (summary.episodes_total ?? 0) - (summary.episodes_done ?? 0));
}

const HEALTH_CLASS = { clean: "st-completed", in_progress: "st-running", cancelled: "st-cancelled" };

// The server's health verdict in words: its badge text and class, and its reason.
export function healthView(summary) {
  const health = summary.health;
  if (!health) return null;
  const errors = health.error_count ?? 0;
  return {
    verdict: health.verdict,
    text: health.verdict === "errors" ? `${errors} errors` : health.verdict,
    className: HEALTH_CLASS[health.verdict] ?? "st-failed",
    reason: health.reason ?? "",
  };
}

// "n = 29 of 900": how many episodes a rate rests on, out of those planned.
export function coverageText(n, summary) {
  const total = summary.episodes_total;
  return isNum(total) && total > 0 ? `n = ${n ?? 0} of ${total}` : `n = ${n ?? 0}`;
}

export function successRate(summary) {
  const agg = summary.aggregate_metrics?.success;
  return isNum(agg?.mean) ? agg.mean : summary.success_rate;
}

// The success rate's 95 % interval as served (the aggregate's, or the listing row's copy).
export function successInterval(summary) {
  const agg = summary.aggregate_metrics?.success;
  const [lo, hi] = agg ? [agg.lo, agg.hi] : [summary.success_lo, summary.success_hi];
  return isNum(lo) && isNum(hi) ? [lo, hi] : null;
}

// Success as parts: the rate, its interval, what it covers, the errors it does not score.
export function successParts(summary) {
  const agg = summary.aggregate_metrics?.success;
  const rate = successRate(summary);
  if (!isNum(rate)) return { rate: errorCount(summary) ? "– (no verdicts)" : "–" };
  const interval = successInterval(summary);
  const n = agg ? agg.n : summary.success_n;
  const planned = isNum(agg?.n_planned) ? agg.n_planned
    : isNum(summary.success_n_planned) ? summary.success_n_planned : summary.episodes_total;
  const errors = agg ? agg.n_errors : summary.success_n_errors;
  return {
    rate: fmtPct(rate),
    interval: interval ? fmtInterval(...interval, fmtPct) : "",
    coverage: isNum(n) ? `(${coverageText(n, { episodes_total: planned })})` : "",
    errors: errors ? `${errors} errors not scored` : "",
  };
}

// Success in one line: "72.0 % [60.1 %, 81.2 %] (n = 29 of 30) · 2 errors not scored".
export function successText(summary) {
  const parts = successParts(summary);
  const text = [parts.rate, parts.interval, parts.coverage].filter(Boolean).join(" ");
  return parts.errors ? `${text} · ${parts.errors}` : text;
}

// The rate with errors as failures and the worst/best cases, when errors were not scored.
export function successDetail(summary) {
  const agg = summary.aggregate_metrics?.success;
  if (!agg || !agg.n_errors) return "";
  return `${fmtPct(agg.errors_as_failures)} with errors as failures; `
    + `worst–best ${fmtPct(agg.worst)}–${fmtPct(agg.best)} over every planned episode`;
}

export function etaText(summary, nowS = Date.now() / 1000) {
  const started = summary.timings?.started_at;
  const finished = summary.timings?.finished_at;
  if (summary.status === "queued" || summary.status === "pending") return "waiting";
  if (summary.status !== "running") {
    return isNum(started) && isNum(finished) ? `took ${fmtDuration(finished - started)}` : "";
  }
  const done = summary.episodes_done || 0;
  const left = (summary.episodes_total || 0) - done;
  const elapsed = nowS - started;
  if (!done || !isNum(started) || elapsed <= 0) return "…";
  return `${fmtDuration(left / (done / elapsed))} left`;
}
