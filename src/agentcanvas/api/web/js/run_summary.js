// A run's compact summary shown as progress, success, ETA, and its cancel / resume actions.

import { API, api, enc } from "./api.js";
import { h } from "./dom.js";
import { fmtDuration, fmtPct, isNum } from "./format.js";

const CONFIRM_MS = 3000;
export const ACTIVE = new Set(["pending", "queued", "running"]);
const RESUMABLE = new Set(["aborted", "cancelled", "failed"]);

export function progressBox() {
  return h("div", { class: "progress" },
    h("progress", { max: 1, value: 0 }), h("span", { class: "progress-text" }));
}

// Episodes recorded as cancelled (a cancelled run's remainder) do not count as done.
export function setProgress(box, summary, source) {
  const bar = box.querySelector("progress");
  const total = summary.episodes_total || 0;
  const cancelled = summary.status_counts?.cancelled ?? 0;
  const done = (summary.episodes_done || 0) - cancelled;
  bar.max = Math.max(total, 1);
  bar.value = Math.min(done, bar.max);
  const text = total ? `${done}/${total}${cancelled ? ` · ${cancelled} cancelled` : ""}` : "–";
  box.querySelector(".progress-text").textContent = text;
  box.dataset.status = summary.status || "";
  if (source) box.dataset.source = source;
}

export function successRate(summary) {
  const agg = summary.aggregate_metrics?.success;
  return isNum(agg?.mean) ? agg.mean : summary.success_rate;
}

export function successText(summary) {
  const agg = summary.aggregate_metrics?.success;
  const rate = successRate(summary);
  if (!isNum(rate)) return "–";
  return agg && isNum(agg.lo) ? `${fmtPct(rate)} (n=${agg.n})` : fmtPct(rate);
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
  if (RESUMABLE.has(summary.status)) {
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
