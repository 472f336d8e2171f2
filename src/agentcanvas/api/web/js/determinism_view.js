// The run page's Determinism panel: the server's level in words (what was checked, never
// more), the seed function, the shared servers' modes, and every batched function's audit.

import { dataTable, h, keyValues, notice, num, rowHead, scroller } from "./dom.js";
import { isNum } from "./format.js";

// The server's determinism level, in words: what was checked, never more.
const LEVEL_WORDS = { certified: "certified", sampled: "sampled (not proven)", unverified: "unverified",
  broken: "BROKEN" };
const LEVEL_CLASS = { certified: "st-completed", sampled: "st-running", unverified: "st-failed", broken: "st-failed" };
// A summary written before levels has none: said so, not guessed here.
const level = (info) => info.level ?? "not recorded";

export function determinismBlock(info) {
  if (!info) return notice("No determinism record.");
  const modes = Object.entries(info.shared_server_modes ?? {});
  return h("div", { class: "determinism", id: "determinism" },
    h("p", { id: "determinism-level", dataset: { level: level(info) } },
      h("span", { class: `badge ${LEVEL_CLASS[level(info)] ?? "st-failed"}` }, LEVEL_WORDS[level(info)] ?? level(info)),
      ` ${info.level_detail ?? "(a summary written before determinism levels)"}`),
    keyValues([["seed function", h("code", {}, info.seed_function ?? "–")],
      ["shared servers", modes.map(([name, mode]) => `${name}: ${mode}`).join(" · ") || "none"]]),
    batchedFunctions(info.batched_functions),
    info.reasons?.length ? h("ul", { class: "reasons" }, info.reasons.map((r) => h("li", {}, r))) : null);
}

// Every batched function the run used: its mode, how it was verified, the audit, a mismatch.
function batchedFunctions(functions) {
  const rows = Object.entries(functions ?? {}).sort(([a], [b]) => a.localeCompare(b));
  if (!rows.length) return null;
  const mismatch = (f) => (f.mismatch == null ? "–" : `${f.mismatch}${isNum(f.first_episode_affected)
    ? ` (first episode affected: ${f.first_episode_affected})` : ""}`);
  return scroller(dataTable("batched-functions",
    ["Batched function", "Level", "Mode", "Verified by", "Audited", "Batched", "Mismatch"],
    rows.map(([name, f]) => h("tr", { "data-function": name, "data-verified": String(!!f.verified),
      "data-level": f.level ?? "" },
      rowHead(name),
      h("td", { title: f.level_detail ?? "" }, f.level ? LEVEL_WORDS[f.level] ?? f.level : "–"),
      h("td", {}, h("span", { class: `badge ${f.verified ? "st-completed" : "st-failed"}` }, f.mode)),
      h("td", {}, f.verified_by ?? "–"),
      num(isNum(f.run_batches) ? `${f.run_batches_audited ?? 0} of ${f.run_batches}` : f.batches_audited ?? 0),
      num(f.batched_requests ?? 0), h("td", {}, mismatch(f)))),
    [4, 5]));
}
