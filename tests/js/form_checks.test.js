// The start form's syntax checks and the body it sends (priority included).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  checkField, FORM_FIELDS, splitTags, startBody, tagsProblem,
} from "../../src/agentcanvas/api/web/js/form_checks.js";

const field = (name) => FORM_FIELDS.find((f) => f.name === name);

test("whole numbers within their bounds; optional ones may be empty", () => {
  assert.equal(checkField(field("episode_count"), "0"), "must be at least 1");
  assert.equal(checkField(field("episode_count"), "2.5"), "must be a whole number");
  assert.equal(checkField(field("episode_count"), ""), "required");
  assert.equal(checkField(field("step_budget"), ""), null);
  assert.equal(checkField(field("priority"), "101"), "must be at most 100");
  assert.equal(checkField(field("priority"), "-100"), null);
  assert.equal(checkField(field("graph_name"), ""), "pick a graph");
  assert.equal(checkField(field("tasks"), "a,,b"), "comma-separated task ids, none empty");
});

test("tags: split on commas, each checked", () => {
  assert.deepEqual(splitTags(" a, b ,, c"), ["a", "b", "c"]);
  assert.equal(tagsProblem("ok, fine.v2"), null);
  assert.match(tagsProblem("ok, no spaces"), /"no spaces"/);
});

test("the body carries priority and leaves empty optional fields to the server", () => {
  const body = startBody({ graph_name: "walk", episode_count: "3", worker_count: "2", seed: "0",
    priority: "7", step_budget: "", tasks: "", name: " n ", tags: "a, a, b", note: "", save_frames: true });
  assert.deepEqual(body, { graph_name: "walk", episode_count: 3, worker_count: 2, seed: 0,
    save_frames: true, priority: 7, name: "n", tags: ["a", "b"] });
  assert.equal("priority" in startBody({ priority: "" }), false);
});
