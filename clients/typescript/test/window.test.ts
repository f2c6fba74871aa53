// A Consume stream's credit window, without a server.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Window } from "../src/cstream.js";

test("the window grows while deliveries find handlers quickly and shrinks once they wait", () => {
  const w = new Window(100, 1000);
  const step = (waitedMs: number, n: number, credits: number, size: number) => {
    w.waited(waitedMs);
    assert.equal(w.creditsFor(n), credits, `waited ${waitedMs} ms, ${n} settled: credits`);
    assert.equal(w.size, size, `waited ${waitedMs} ms, ${n} settled: window`);
    assert.equal(w.waitedMs, -1, "the longest wait is taken");
  };
  step(1, 100, 200, 200); // keeping up: grows by what was settled
  step(50, 300, 600, 500);
  step(0, 900, 1400, 1000); // up to maxPrefetch
  step(0, 50, 50, 1000);
  step(500, 70, 70, 1000); // between: held
  step(2000, 300, 0, 700); // waiting long: shrinks by what was settled
  step(2000, 1000, 400, 100); // down to prefetch
  step(2000, 10, 10, 100);
});

test("a settle with no delivery started since the last holds the window", () => {
  const w = new Window(100, 1000);
  w.waited(1);
  assert.equal(w.creditsFor(50), 100);
  assert.equal(w.creditsFor(30), 30, "no wait known: the settled come back, no more");
  assert.equal(w.size, 150);
});

test("the longest wait since the last settle decides", () => {
  const w = new Window(100, 1000);
  w.waited(5);
  w.waited(1500);
  w.waited(5);
  assert.equal(w.creditsFor(10), 10, "a wait over a second among quick ones: no growth");
});

test("a prefetch the caller set is fixed", () => {
  const w = new Window(10, 10);
  for (const ms of [0, 2000]) {
    w.waited(ms);
    assert.equal(w.creditsFor(7), 7);
    assert.equal(w.size, 10);
  }
});
