// Why an episode ended, in words, from its record's fields (end_reason, failed_node,
// node_errors, error): what the episode table and the episode page show, so that the cause is
// never one click away. The same words as the server's failure groups (failure_report.py).
// Pure: no DOM, so that Node can test it (tests/js).

import { truncate } from "./format.js";

export const MAX_MESSAGE_CHARS = 160;

export const END_REASON_WORDS = {
  success: "success",
  env_done: "the env said it failed",
  budget_exhausted: "budget exhausted",
  timeout: "timed out",
  error: "a node failed",
  exception: "exception outside the nodes",
  worker_lost: "worker lost",
  no_verdict: "no verdict",
  cancelled: "cancelled",
};

// The first non-empty line of a message, bounded.
export function firstLine(text, max = MAX_MESSAGE_CHARS) {
  const line = String(text ?? "").split("\n").map((part) => part.trim()).find(Boolean) ?? "";
  return truncate(line, max);
}

// The node to blame: the record's failed_node, else the first node (by id) that failed.
function blamedNode(e) {
  if (e.failed_node) return e.failed_node;
  const nodes = Object.keys(e.node_errors ?? {}).sort();
  return nodes[0] ?? null;
}

// The blamed node's own error (not "node errors in: mid"), else the record's error.
function problem(e) {
  const node = blamedNode(e);
  const nodeError = node ? e.node_errors?.[node] : null;
  if (!nodeError) return { node: null, text: firstLine(e.error ?? ""), more: "" };
  const others = Object.keys(e.node_errors).length - 1;
  return { node, text: firstLine(nodeError), more: others > 0 ? ` (+${others} other node(s))` : "" };
}

// What went wrong, from the record's fields: "node mid: RuntimeError: boom", or its error.
export function recordMessage(e) {
  const { node, text, more } = problem(e);
  return node ? `node ${node}: ${text}${more}` : text;
}

// The end reason in words, with the node where one is to blame: "exception in node mid".
export function endReasonText(e) {
  const reason = e.end_reason;
  if (!reason) return "";
  const node = blamedNode(e);
  if (reason === "error" && node) return `exception in node ${node}`;
  if (reason === "timeout" && e.failed_node) return `timed out in node ${e.failed_node}`;
  return END_REASON_WORDS[reason] ?? reason;
}

// Why an episode that did not succeed ended, in one line ("" for a success):
// "exception in node mid: fglue.mid: RuntimeError: boom", "budget exhausted". A record
// written before end_reason existed gives its message alone.
export function whyText(e) {
  if (e.end_reason === "success") return "";
  const reason = endReasonText(e);
  const { node, text, more } = problem(e);
  const message = node && reason.endsWith(`node ${node}`) ? `${text}${more}` : recordMessage(e);
  return [reason, message].filter(Boolean).join(": ");
}

// A list of episode indices cut after `shown`: the first ones, and the rest (to collapse).
export function splitList(items, shown = 12) {
  return { head: items.slice(0, shown), rest: items.slice(shown) };
}

// The tracebacks a record holds, each with what raised it: the episode's, then each node's.
export function tracebacks(e) {
  const found = e.traceback ? [{ title: "Traceback", text: e.traceback }] : [];
  for (const [node, text] of Object.entries(e.node_tracebacks ?? {}).sort()) {
    if (text) found.push({ title: `Traceback of node ${node}`, text, node });
  }
  return found;
}
