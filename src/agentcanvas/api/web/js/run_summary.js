// A run's compact summary shown as progress, health, success with its coverage, ETA, and its
// cancel / resume actions. Errors are amber/red on the bar and cancelled episodes grey, apart.

import { API, api, enc } from "./api.js";
import { h } from "./dom.js";
import { fmtDuration, fmtPct, isNum } from "./format.js";
import { notNeeded } from "./stop_rules.js";

const CONFIRM_MS = 3000;
export const ACTIVE = new Set(["pending", "queued", "running"]);
const RESUMABLE = new Set(["aborted", "cancelled", "failed"]);
const ERROR_STATUSES = ["error", "exception", "timeout", "no_verdict"];

// The <progress> stays first (for screen readers and scripts); the visible bar is segmented;
// its last segment is the rest of a plan that a stop rule made unnecessary.
export function progressBox() {
  const segments = ["ok", "err", "cancel", "skip"].map((kind) => h("span", { class: `seg ${kind}` }));
  return h("div", { class: "progress" },
    h("progress", { max: 1, value: 0, class: "sr-only" }),
    h("span", { class: "segbar", "aria-hidden": "true" }, segments),
    h("span", { class: "progress-text" }));
}

export function errorCount(summary) {
  const counts = summary.status_counts ?? {};
  return ERROR_STATUSES.reduce((sum, status) => sum + (counts[status] ?? 0), 0);
}

// The summary's episodes_done counts the episodes that ended; those recorded as cancelled (in
// flight when the run was cancelled) are not in it, only in status_counts.
export function progressCounts(summary) {
  const total = summary.episodes_total || 0;
  const cancelled = summary.status_counts?.cancelled ?? 0;
  const done = Math.max(0, summary.episodes_done || 0);
  return { total, cancelled, done, errors: Math.min(errorCount(summary), done) };
}

export function setProgress(box, summary, source) {
  const bar = box.querySelector("progress");
  const { total, cancelled, done, errors } = progressCounts(summary);
  bar.max = Math.max(total, 1);
  bar.value = Math.min(done, bar.max);
  const pct = (n) => `${(100 * n) / Math.max(total, 1)}%`;
  const [ok, err, cancel, skip] = box.querySelectorAll(".seg");
  const skipped = notNeeded(summary);
  ok.style.width = pct(done - errors);
  err.style.width = pct(errors);
  cancel.style.width = pct(Math.min(cancelled, Math.max(0, total - done)));
  skip.style.width = pct(skipped);
  const parts = [`${done}/${total}`, errors ? `${errors} errors` : "",
    cancelled ? `${cancelled} cancelled` : "",
    skipped ? `stop rule decided: ${skipped} not needed` : ""].filter(Boolean);
  box.querySelector(".progress-text").textContent = total ? parts.join(" · ") : "–";
  box.dataset.stopped = String(skipped > 0);
  box.title = skipped ? `${summary.stop.decision}: the stop rule decided after ${done} of ${total} `
    + `planned episodes; the other ${skipped} were not needed` : "";
  box.dataset.status = shownStatus(summary);
  box.dataset.errors = String(errors);
  box.dataset.allErrors = String(done > 0 && errors === done);
  if (source) box.dataset.source = source;
}

// Whether nothing is left to run: every planned episode ended, none as cancelled.
export function allEpisodesEnded(summary) {
  const { total, done } = progressCounts(summary);
  return total > 0 && done >= total;
}

// A run cancelled after its last episode had ended lost nothing: it shows as completed.
export function shownStatus(summary) {
  return summary.status === "cancelled" && allEpisodesEnded(summary) ? "completed" : summary.status;
}

const HEALTH_CLASS = { clean: "st-completed", in_progress: "st-running", cancelled: "st-cancelled" };

// The verdict shown: a run cancelled after its last episode ended, without errors, is clean.
export function shownVerdict(summary) {
  const health = summary.health;
  if (!health) return null;
  return summary.status === "cancelled" && allEpisodesEnded(summary) && !health.error_count
    ? "clean" : health.verdict;
}

// The run's health verdict as a badge: a run with errors never looks like a clean one.
export function healthBadge(summary) {
  const health = summary.health;
  if (!health) return h("span", { class: "badge" }, "–");
  const verdict = shownVerdict(summary);
  return h("span", {
    class: `badge health ${HEALTH_CLASS[verdict] ?? "st-failed"}`, dataset: { verdict },
    title: health.reason || "", text: verdict === "errors" ? `${health.error_count} errors` : verdict,
  });
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

// Success over the scored episodes, and beside it what the errors could change; the title
// (successDetail) adds the rate with errors as failures and the worst/best cases.
export function successText(summary) {
  const agg = summary.aggregate_metrics?.success;
  const rate = successRate(summary);
  if (!isNum(rate)) return errorCount(summary) ? "– (no verdicts)" : "–";
  if (!agg) return fmtPct(rate);
  const planned = isNum(agg.n_planned) ? agg.n_planned : summary.episodes_total;
  const text = `${fmtPct(rate)} (${coverageText(agg.n, { episodes_total: planned })})`;
  return agg.n_errors ? `${text} · ${agg.n_errors} errors not scored` : text;
}

export function successDetail(summary) {
  const agg = summary.aggregate_metrics?.success;
  if (!agg || !agg.n_errors) return "";
  return `${fmtPct(agg.errors_as_failures)} with errors as failures; `
    + `worst–best ${fmtPct(agg.worst)}–${fmtPct(agg.best)} over every planned episode`;
}

export function etaText(summary) {
  const started = summary.timings?.started_at;
  const finished = summary.timings?.finished_at;
  if (summary.status === "queued" || summary.status === "pending") return "waiting";
  if (summary.status !== "running") {
    return isNum(started) && isNum(finished) ? `took ${fmtDuration(finished - started)}` : "";
  }
  const done = summary.episodes_done || 0;
  const left = (summary.episodes_total || 0) - done;
  const elapsed = Date.now() / 1000 - started;
  if (!done || !isNum(started) || elapsed <= 0) return "…";
  return `${fmtDuration(left / (done / elapsed))} left`;
}

function confirmButton(text, confirmText, action) {
  const button = h("button", { type: "button", text });
  button.addEventListener("click", async () => {
    if (button.dataset.armed !== "1") {
      button.dataset.armed = "1";
      button.textContent = confirmText;
      setTimeout(() => {
        if (button.dataset.armed !== "1") return;
        button.dataset.armed = "";
        button.textContent = text;
      }, CONFIRM_MS);
      return;
    }
    button.dataset.armed = "done";
    button.disabled = true;
    await action(button);
  });
  return button;
}

export function runActions(summary, onAction) {
  const buttons = [];
  if (ACTIVE.has(summary.status)) {
    buttons.push(confirmButton("Cancel", "Really cancel?", (b) => onAction("cancel", summary.run_id, b)));
  }
  if (RESUMABLE.has(shownStatus(summary)) && !allEpisodesEnded(summary)) {
    const resume = h("button", { type: "button", text: "Resume" });
    resume.addEventListener("click", () => {
      resume.disabled = true;
      onAction("resume", summary.run_id, resume);
    });
    buttons.push(resume);
  }
  return buttons.map((b) => Object.assign(b, { className: `action ${b.textContent.toLowerCase()}` }));
}

export async function runAction(kind, runId, button) {
  try {
    await api(`${API}/${kind}/${enc(runId)}`, { method: "POST" });
    button.textContent = kind === "cancel" ? "Cancelling…" : "Queued";
  } catch (err) {
    button.disabled = false;
    button.title = err.message;
    button.textContent = "Failed";
  }
}
