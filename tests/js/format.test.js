// Number, time and text formatting: "–" for what is missing, never "NaN" or "undefined".
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  fmtDuration, fmtInterval, fmtNum, fmtPct, fmtPp, fmtPpInterval, fmtSig, truncate,
} from "../../src/agentcanvas/api/web/js/format.js";

test("numbers: integers as they are, others to three decimals, missing as a dash", () => {
  assert.equal(fmtNum(3), "3");
  assert.equal(fmtNum(0.12345), "0.123");
  assert.equal(fmtNum(true), "1");
  for (const missing of [null, undefined, NaN, Infinity]) assert.equal(fmtNum(missing), "–");
  assert.equal(fmtNum("text"), "text");
});

test("rates in percent with one decimal, intervals only when both ends are numbers", () => {
  assert.equal(fmtPct(0.725), "72.5 %");
  assert.equal(fmtPct(null), "–");
  assert.equal(fmtInterval(0.1, 0.25), "[0.100, 0.250]");
  assert.equal(fmtInterval(0.1, 0.25, fmtPct), "[10.0 %, 25.0 %]");
  assert.equal(fmtInterval(0.1, null), "–");
});

test("differences in signed percentage points, with a true minus sign", () => {
  assert.equal(fmtPp(0.125), "+12.5 pp");
  assert.equal(fmtPp(-0.05), "−5.0 pp");
  assert.equal(fmtPp(0), "±0.0 pp");
  assert.equal(fmtPpInterval(-0.1, 0.2), "[−10.0 pp, +20.0 pp]");
  assert.equal(fmtPpInterval(undefined, 0.2), "–");
});

test("three significant figures without trailing zeros", () => {
  assert.equal(fmtSig(26.81), "26.8");
  assert.equal(fmtSig(20), "20");
  assert.equal(fmtSig(0.0012345), "0.00123");
  assert.equal(fmtSig(NaN), "–");
});

test("durations read as a person would say them", () => {
  assert.equal(fmtDuration(0.5), "0.50 s");
  assert.equal(fmtDuration(9.94), "9.9 s");
  assert.equal(fmtDuration(42), "42 s");
  assert.equal(fmtDuration(125), "2 min 05 s");
  assert.equal(fmtDuration(3 * 3600 + 7 * 60), "3 h 07 min");
  assert.equal(fmtDuration(-1), "–");
  assert.equal(truncate("abcdef", 4), "abc…");
  assert.equal(truncate("abc", 4), "abc");
});
