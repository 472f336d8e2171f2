// A run's progress bar, its health badge and its cancel / resume actions. Errors are
// amber/red on the bar and cancelled episodes grey, apart; the counts and the verdict are the
// server's (run_facts.js words them).

import { API, api, enc } from "./api.js";
import { h } from "./dom.js";
import { ACTIVE, canResume, healthView, notNeeded, progressCounts } from "./run_facts.js";

const CONFIRM_MS = 3000;

// The <progress> stays first (for screen readers and scripts); the visible bar is segmented;
// its last segment is the rest of a plan that a stop rule made unnecessary.
export function progressBox() {
  const segments = ["ok", "err", "cancel", "skip"].map((kind) => h("span", { class: `seg ${kind}` }));
  return h("div", { class: "progress" },
    h("progress", { max: 1, value: 0, class: "sr-only" }),
    h("span", { class: "segbar", "aria-hidden": "true" }, segments),
    h("span", { class: "progress-text" }));
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
  box.dataset.status = summary.status;
  box.dataset.errors = String(errors);
  box.dataset.allErrors = String(done > 0 && errors === done);
  if (source) box.dataset.source = source;
}

// The server's health verdict as a badge: a run with errors never looks like a clean one.
export function healthBadge(summary) {
  const health = healthView(summary);
  if (!health) return h("span", { class: "badge" }, "–");
  return h("span", { class: `badge health ${health.className}`, dataset: { verdict: health.verdict },
    title: health.reason, text: health.text });
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
  if (canResume(summary)) {
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
