// What the URL holds: the runs list's filters (a link reproduces the view), the compare runs.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  compareHref, isFiltered, runsApiQuery, runsFilters, runsHash,
} from "../../src/agentcanvas/api/web/js/url_state.js";

test("filters round-trip through the hash, the empty ones left out", () => {
  const filters = { text: "walk base", tag: "cli", graph: "walk", status: "completed", offset: 50 };
  const hash = runsHash(filters);
  assert.equal(hash, "#/?q=walk+base&tag=cli&graph=walk&status=completed&offset=50");
  assert.deepEqual(runsFilters(new URLSearchParams(hash.split("?")[1])), filters);
  assert.equal(runsHash({ text: "", tag: "", graph: "", status: "", offset: 0 }), "#/");
  assert.equal(runsHash({ tag: "a&b=c", offset: 0 }), "#/?tag=a%26b%3Dc");
});

test("a bad or missing offset reads as the first page; a filtered view says so", () => {
  for (const offset of ["-5", "abc", "1.5", ""]) {
    assert.equal(runsFilters(new URLSearchParams({ offset })).offset, 0);
  }
  const none = runsFilters(new URLSearchParams());
  assert.deepEqual(none, { text: "", tag: "", graph: "", status: "", offset: 0 });
  assert.equal(isFiltered(none), false);
  assert.equal(isFiltered({ ...none, offset: 50 }), false);
  assert.equal(isFiltered({ ...none, graph: "walk" }), true);
});

test("the listing request takes the same filters and the page", () => {
  const query = runsApiQuery({ text: "x", tag: "", graph: "g", status: "", offset: 100 }, 50);
  assert.equal(query.toString(), "offset=100&limit=50&q=x&graph=g");
});

test("compare links: a leaderboard of runs and a pair, ids encoded", () => {
  assert.equal(compareHref({}), "#/compare");
  assert.equal(compareHref({ runs: ["a", "b c"], a: "a" }), "#/compare?runs=a,b%20c&a=a");
});
