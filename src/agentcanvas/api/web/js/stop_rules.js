// Anytime-valid statistics: the success rate's confidence sequence (valid however often it is
// looked at, unlike the fixed-n interval), a run's stop-rule report, and the anytime-valid
// verdict of a paired comparison. Each number is shown with the method it comes from.

import { enc, runHref } from "./api.js";
import { h, keyValues } from "./dom.js";
import { fmtInterval, fmtNum, fmtSig, isNum } from "./format.js";

// What an eval_progress event's `success_cs` comes from (the event does not name it): the
// summary's live_interval names it in full, and replaces this once loaded.
export const CS_METHOD_FALLBACK = "beta-binomial mixture confidence sequence for a Bernoulli rate "
  + "(Robbins 1970; Howard, Ramdas, McAuliffe & Sekhon 2021)";

const pct = (confidence) => (isNum(confidence) ? `${fmtNum(100 * confidence, 0)} %` : "95 %");

// The success rate's anytime-valid sequence, beside the aggregates' fixed-n interval; null
// before the first scored episode of the plan-order prefix.
export function liveCsLine(summary, live) {
  const cs = summary.live_interval;
  if (!cs || !isNum(cs.lo) || !isNum(cs.hi)) return null;
  const method = cs.method || CS_METHOD_FALLBACK;
  const over = isNum(cs.n) ? ` over ${cs.n} scored episode${cs.n === 1 ? "" : "s"}` : "";
  const prefix = isNum(cs.prefix) && cs.prefix !== cs.n
    ? ` (plan-order prefix of ${cs.prefix} episodes)` : "";
  const when = live ? "so far, valid however often it is looked at"
    : "at the end of the run; unlike the fixed-n interval above, it stays valid however often "
      + "the run was watched or stopped";
  return h("div", { class: "live-cs", id: "live-cs", title: method,
    dataset: { state: live ? "live" : "final", lo: String(cs.lo), hi: String(cs.hi),
      n: isNum(cs.n) ? String(cs.n) : "" } },
  h("p", {}, h("span", { class: "badge cs-badge" }, "success"), " anytime-valid ",
    pct(cs.confidence), " CS ", h("strong", { class: "cs-interval" }, fmtInterval(cs.lo, cs.hi)),
    over, prefix, h("span", { class: "muted" }, ` — ${when}.`)),
  h("p", { class: "method-line" }, "method: ", h("span", { class: "cs-method" }, method)));
}

const RULE_WORDS = {
  until_decided_vs: "until decided against a baseline (until_decided_vs)",
  until_halfwidth: "until the success interval is narrow enough (until_halfwidth)",
};
const DECIDED_CLASS = { "B better": "st-completed", "B worse": "st-failed", "narrow enough": "st-completed" };

// "e-value 26.8 ≥ 20 = 1/α"
function evidenceText(evidence, threshold) {
  if (!isNum(evidence)) return "–";
  const vs = isNum(threshold) ? ` ${evidence >= threshold ? "≥" : "<"} ${fmtSig(threshold)} = 1/α` : "";
  return `e-value ${fmtSig(evidence)}${vs}`;
}

function baselineLink(summary) {
  const baseline = summary.config?.until_decided_vs;
  if (!baseline) return null;
  return h("span", { class: "links" }, " · ", h("a", { href: runHref(baseline), text: "baseline run" }),
    " · ", h("a", { id: "stop-compare", text: "compare with it",
      href: `#/compare?a=${enc(baseline)}&b=${enc(summary.run_id)}` }));
}

// The rule's configured target, before it has reported (a run that is still going).
function configuredRule(config) {
  if (config?.until_decided_vs) return ["until_decided_vs", `baseline run ${config.until_decided_vs}`];
  if (isNum(config?.until_halfwidth)) {
    return ["until_halfwidth", `±${fmtSig(config.until_halfwidth)} (overall success rate, all tasks pooled)`];
  }
  return null;
}

// The "Stop rule" panel's body, or null when the run has no stop rule.
export function stopBlock(summary) {
  const stop = summary.stop;
  if (!stop) {
    const rule = configuredRule(summary.config);
    if (!rule) return null;
    const alpha = summary.config?.stop_alpha;
    return h("div", { class: "stop-report", dataset: { state: "pending" } },
      h("p", { id: "stop-rule" }, h("strong", {}, RULE_WORDS[rule[0]] ?? rule[0]), `: ${rule[1]}`,
        isNum(alpha) ? ` · α ${fmtSig(alpha)}` : "", baselineLink(summary)),
      h("p", { class: "muted", id: "stop-pending" }, summary.status === "completed" || summary.status === "failed"
        ? "No decision was recorded for this run."
        : "Not decided yet: the run ends as soon as the rule decides, or at its cap of "
          + `${summary.episodes_total ?? "–"} planned episodes.`));
  }
  const saved = Math.max(0, (stop.episodes_planned ?? 0) - (stop.episodes_used ?? 0));
  const episodes = stop.decided
    ? `after ${stop.episodes_used} of ${stop.episodes_planned} planned episodes (${saved} not run: `
      + "not needed once the rule decided)"
    : `on all ${stop.episodes_used} of ${stop.episodes_planned} planned episodes: the rule did not `
      + "decide before the cap";
  const rows = [];
  if (isNum(stop.evidence)) {
    rows.push(["evidence", h("span", { id: "stop-evidence" }, evidenceText(stop.evidence, stop.threshold))]);
  }
  if (isNum(stop.b_wins) || isNum(stop.a_wins)) {
    rows.push(["discordant pairs", h("span", { id: "stop-pairs" },
      `${stop.b_wins ?? 0} only this run succeeded on, ${stop.a_wins ?? 0} only the baseline`)]);
  }
  if (isNum(stop.halfwidth)) {
    const target = summary.config?.until_halfwidth;
    rows.push(["half-width", h("span", { id: "stop-halfwidth" }, `±${fmtNum(stop.halfwidth)}`
      + (isNum(target) ? ` (target ±${fmtSig(target)})` : "")
      + ": half the width of the success rate's anytime-valid confidence sequence")]);
  }
  if (stop.kept_apart) {
    rows.push(["kept apart", h("span", { id: "stop-kept-apart" },
      `${stop.kept_apart} episode(s) in flight finished past the decision: kept out of the records `
      + "and aggregates (the same at any worker count), in the run's folder ",
      h("code", {}, `${stop.kept_apart_folder || "past_stop"}/`))]);
  }
  rows.push(["α", fmtSig(stop.alpha)]);
  rows.push(["method", h("span", { id: "stop-method" }, stop.method)]);
  return h("div", { class: "stop-report", dataset: { state: stop.decided ? "decided" : "cap",
    decision: stop.decision } },
  h("p", { class: "stop-decision" }, h("span", {
    class: `badge big ${DECIDED_CLASS[stop.decision] ?? "st-queued"}`, id: "stop-decision",
    text: stop.decision })),
  h("p", { id: "stop-rule" }, h("strong", {}, RULE_WORDS[stop.rule] ?? stop.rule), `: ${stop.target}`,
    baselineLink(summary)),
  h("p", { id: "stop-episodes" }, episodes),
  keyValues(rows),
  stop.note ? h("p", { class: "muted", id: "stop-note" }, stop.note) : null);
}

// The compare page's anytime-valid verdict: decided, or how far from deciding.
export function sequentialVerdict(seq) {
  if (!seq) return null;
  const evidence = evidenceText(seq.evidence, seq.threshold);
  let line;
  if (seq.decided) {
    line = `decided: ${seq.decision} (${evidence})`;
  } else if (isNum(seq.more_pairs)) {
    line = `${seq.decision}: about ${seq.more_pairs} more paired episodes would likely decide it `
      + `(${evidence})`;
  } else {
    const why = seq.note || (seq.pairs ? "" : "no paired episodes yet");
    line = `${seq.decision}${why ? `: ${why}` : ""} (${evidence})`;
  }
  return h("div", { class: "sequential", id: "sequential",
    dataset: { decided: String(!!seq.decided), decision: seq.decision } },
  h("p", { class: seq.decided ? "verdict sig" : "verdict", id: "sequential-verdict" }, line),
  keyValues([
    ["pairs (errors as failures)", `${seq.pairs} · ${seq.b_wins} only B succeeded, ${seq.a_wins} only A`],
    ["α", fmtSig(seq.alpha)],
    ["method", h("span", { id: "sequential-method" }, seq.method)],
  ]),
  // With more_pairs the line gives the number; the note says how it was simulated.
  !seq.decided && isNum(seq.more_pairs) && seq.note
    ? h("p", { class: "muted", id: "sequential-note" }, seq.note) : null,
  h("p", { class: "muted" }, "Valid however the runs were watched or stopped early, unlike the "
    + "fixed-n McNemar p-value above."));
}
