// Why an episode ended, in words from its record's fields: the node's own error, not the
// summary line "node errors in: mid"; the end reason in plain words; long lists cut.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  endReasonText, firstLine, recordMessage, splitList, tracebacks, whyText,
} from "../../src/agentcanvas/api/web/js/failure_words.js";

const nodeError = {
  status: "error", end_reason: "error", failed_node: "mid", error: "node errors in: mid",
  node_errors: { mid: "fglue.mid: RuntimeError: mid failed on episode 1\nmore detail" },
  node_tracebacks: { mid: "Traceback (most recent call last):\n  ...\nRuntimeError: mid" },
};

test("a node error says the node and its own message's first line", () => {
  assert.equal(recordMessage(nodeError), "node mid: fglue.mid: RuntimeError: mid failed on episode 1");
  assert.equal(endReasonText(nodeError), "exception in node mid");
  assert.equal(whyText(nodeError), "exception in node mid: fglue.mid: RuntimeError: mid failed on episode 1");
  const two = { ...nodeError, node_errors: { ...nodeError.node_errors, zed: "boom" } };
  assert.ok(whyText(two).endsWith("(+1 other node(s))"), whyText(two));
});

test("other endings read as plain words, with the error when there is one", () => {
  const start = { status: "exception", end_reason: "exception", error: "UserInputError: no\nTraceback" };
  assert.equal(whyText(start), "exception outside the nodes: UserInputError: no");
  assert.equal(whyText({ status: "completed", end_reason: "budget_exhausted" }), "budget exhausted");
  assert.equal(whyText({ status: "completed", end_reason: "env_done" }), "the env said it failed");
  assert.equal(whyText({ status: "completed", end_reason: "success" }), "");
  const late = { status: "timeout", end_reason: "timeout", failed_node: "pi", error: "deadline: pi" };
  assert.equal(whyText(late), "timed out in node pi: deadline: pi");
  // A record from before end_reason existed: its message alone.
  assert.equal(whyText({ status: "error", error: "node errors in: n", node_errors: { n: "boom" } }),
    "node n: boom");
});

test("messages are bounded and lists split for collapsing", () => {
  assert.equal(firstLine(`\n  ${"x".repeat(500)}\nsecond`, 10), `${"x".repeat(9)}…`);
  assert.equal(firstLine(null), "");
  const { head, rest } = splitList([...Array(30).keys()], 12);
  assert.equal(head.length, 12);
  assert.deepEqual(rest, [...Array(18).keys()].map((i) => i + 12));
});

test("tracebacks: the episode's, then each node's, none when none was recorded", () => {
  assert.deepEqual(tracebacks(nodeError).map((t) => t.title), ["Traceback of node mid"]);
  const both = { ...nodeError, traceback: "Traceback: outer" };
  assert.deepEqual(tracebacks(both).map((t) => t.title), ["Traceback", "Traceback of node mid"]);
  assert.deepEqual(tracebacks({ status: "completed" }), []);
});
