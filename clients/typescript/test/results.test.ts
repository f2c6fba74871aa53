// The handler results, without a server.

import { test } from "node:test";
import assert from "node:assert/strict";
import { deadLetter, retry } from "../src/index.js";

test("retry rounds up to whole milliseconds, never below 0, and says why", () => {
  assert.deepEqual(retry(1.5), { kind: "retry", delayMs: 2, reason: "retry after 2ms" });
  assert.deepEqual(retry(-5), { kind: "retry", delayMs: 0, reason: "retry after 0ms" });
  assert.deepEqual(retry(100, "card declined"), { kind: "retry", delayMs: 100, reason: "card declined" });
});

test("deadLetter keeps its reason", () => {
  assert.deepEqual(deadLetter("unparsable"), { kind: "dead-letter", reason: "unparsable" });
});
