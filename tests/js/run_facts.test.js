// A run's summary in words: every verdict and count is the server's, shown as served.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  allEpisodesEnded, canResume, errorCount, etaText, healthView, notNeeded, progressCounts,
  successInterval, successParts, successText,
} from "../../src/agentcanvas/api/web/js/run_facts.js";

const finished = {
  status: "cancelled",
  episodes_total: 3,
  episodes_done: 3,
  status_counts: { completed: 3 },
  health: { verdict: "cancelled", error_count: 0, reason: "the run is cancelled" },
};

test("the health verdict is the server's, even where every episode had ended", () => {
  // A run cancelled after its last episode: the page once called it "clean" itself.
  assert.equal(allEpisodesEnded(finished), true);
  assert.deepEqual(healthView(finished), {
    verdict: "cancelled", text: "cancelled", className: "st-cancelled", reason: "the run is cancelled",
  });
  assert.equal(canResume(finished), false, "nothing is left to run");
  assert.equal(canResume({ ...finished, episodes_done: 1 }), true);
  assert.equal(healthView({ status: "completed" }), null);
});

test("an errors verdict says how many, and counts come from health, not status_counts", () => {
  const summary = {
    status: "completed", episodes_total: 4, episodes_done: 4,
    // status_counts alone would say 3 errors; the server's verdict counts 2
    status_counts: { completed: 1, error: 2, mystery: 1 },
    health: { verdict: "errors", error_count: 2, reason: "2 of 4 episodes ended without a verdict" },
  };
  assert.equal(errorCount(summary), 2);
  assert.equal(healthView(summary).text, "2 errors");
  assert.equal(healthView(summary).className, "st-failed");
  assert.deepEqual(progressCounts(summary), { total: 4, cancelled: 0, done: 4, errors: 2 });
  assert.equal(errorCount({ status_counts: { error: 5 } }), 0, "no verdict served: no errors guessed");
});

test("success shows its interval and coverage, from the aggregate or the listing row", () => {
  const aggregate = { status: "completed", episodes_total: 30, health: { error_count: 2 },
    aggregate_metrics: { success: { mean: 0.72, lo: 0.6, hi: 0.81, n: 28, n_planned: 30, n_errors: 2 } } };
  assert.deepEqual(successParts(aggregate), {
    rate: "72.0 %", interval: "[60.0 %, 81.0 %]", coverage: "(n = 28 of 30)",
    errors: "2 errors not scored",
  });
  assert.equal(successText(aggregate), "72.0 % [60.0 %, 81.0 %] (n = 28 of 30) · 2 errors not scored");
  const row = { episodes_total: 6, success_rate: 0.5, success_lo: 0.2, success_hi: 0.8,
    success_n: 6, success_n_planned: 6 };
  assert.deepEqual(successInterval(row), [0.2, 0.8]);
  assert.equal(successText(row), "50.0 % [20.0 %, 80.0 %] (n = 6 of 6)");
  assert.equal(successText({ health: { error_count: 3 } }), "– (no verdicts)");
  assert.equal(successText({}), "–");
});

test("a stop rule's unneeded episodes count only for a run it decided", () => {
  const decided = { status: "completed", episodes_total: 100, episodes_done: 40, stop: { decided: true } };
  assert.equal(notNeeded(decided), 60);
  assert.equal(notNeeded({ ...decided, status: "cancelled" }), 0);
  assert.equal(notNeeded({ ...decided, stop: { decided: false } }), 0);
});

test("the ETA: waiting, time left at the pace so far, or how long it took", () => {
  assert.equal(etaText({ status: "queued" }), "waiting");
  const running = { status: "running", episodes_total: 10, episodes_done: 2, timings: { started_at: 1000 } };
  assert.equal(etaText(running, 1020), "1 min 20 s left");
  assert.equal(etaText({ ...running, episodes_done: 0 }, 1020), "…");
  assert.equal(etaText({ status: "completed", timings: { started_at: 0, finished_at: 42 } }), "took 42 s");
});
