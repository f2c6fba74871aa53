// The seed scenarios against the real server, over every protocol: gRPC (HTTP/2) from Node,
// Connect and gRPC-Web over HTTP/1.1 and HTTP/2 from Node's transports, and over the browser
// transports (fetch). Short delays (hundreds of ms); every wait has a deadline.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, deadLetter, retry, type Delivery, type Handler, type HourglassClient, type TopicInfo } from "../src/index.js";
import { createNodeClient } from "../src/node.js";
import { createWebClient } from "../src/web.js";
import { startServer, waitFor, type Server } from "./server.js";

const token = "sesame";
let server: Server;

before(async () => {
  server = await startServer(["--auth-token", token, "--max-attempts", "3", "--segment-duration", "2s"]);
});
after(async () => {
  await server?.stop();
});

/** Each client by name, made with its options and a token (or with none, token undefined). */
const clientsOf = (token: string | undefined): Record<string, () => HourglassClient> => ({
  "node-grpc": () => createNodeClient(server.url, { protocol: "grpc", token }),
  "node-connect": () => createNodeClient(server.url, { protocol: "connect", token }),
  "node-connect-h2": () => createNodeClient(server.url, { protocol: "connect", httpVersion: "2", token }),
  "node-grpc-web": () => createNodeClient(server.url, { protocol: "grpc-web", token }),
  "node-grpc-web-h2": () => createNodeClient(server.url, { protocol: "grpc-web", httpVersion: "2", token }),
  "web-connect": () => createWebClient(server.url, { protocol: "connect", token }),
  "web-grpc-web": () => createWebClient(server.url, { protocol: "grpc-web", token }),
});
const clients = clientsOf(token);

const text = (d: { body: Uint8Array }) => new TextDecoder().decode(d.body);

/**
 * Consumes topic with handler until done() holds (checked after each handler call), then stops
 * and waits for consume to settle everything; fails after a deadline.
 */
async function consumeUntil(c: HourglassClient, topic: string, handler: Handler, done: () => boolean, concurrency = 1): Promise<void> {
  const stop = new AbortController();
  const deadline = setTimeout(() => stop.abort(new Error("deadline")), 20000);
  const errors: unknown[] = [];
  try {
    await c.consume(
      topic,
      async (d, ctx) => {
        const r = await handler(d, ctx);
        if (done()) stop.abort();
        return r;
      },
      { signal: stop.signal, concurrency, waitMs: 1000, onError: (e) => errors.push(e) },
    );
  } finally {
    clearTimeout(deadline);
  }
  assert.deepEqual(errors, [], "consume reported errors");
  assert.ok(done(), `consume of ${topic} stopped at its deadline before it was done`);
}

/** The server's count of calls of method started so far, over every protocol (from /metrics). */
async function started(method: string): Promise<number> {
  const res = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  assert.equal(res.status, 200, "GET /metrics");
  let n = 0;
  for (const line of (await res.text()).split("\n")) {
    if (line.startsWith("grpc_server_started_total{") && line.includes(`grpc_method="${method}"`)) n += Number(line.split(" ").pop());
  }
  return n;
}

for (const [name, make] of Object.entries(clients)) {
  describe(name, () => {
    let c: HourglassClient;
    const topic = (t: string) => `${name}.${t}`;
    before(() => {
      c = make();
    });
    after(() => c.close());

    test("an order timeout that is cancelled is never delivered", async () => {
      const order = await c.schedule({ topic: topic("orders"), body: "order 1 timed out", delayMs: 300, key: "order-1" });
      assert.equal(await c.cancel(order.id), "cancelled");
      assert.equal(await c.cancel(order.id), "already-cancelled");
      assert.equal((await c.get(order.id)).state, "cancelled");
      // A message due after it: once that one arrives, the cancelled one would have come first.
      const later = await c.schedule({ topic: topic("orders"), body: "marker", delayMs: 400 });
      const got: Delivery[] = [];
      await consumeUntil(c, topic("orders"), (d) => void got.push(d), () => got.some((d) => d.id === later.id));
      assert.deepEqual(got.map(text), ["marker"]);
    });

    test("an order timeout that is not cancelled is delivered when due, not before", async () => {
      const order = await c.schedule({ topic: topic("timeouts"), body: "order 2 timed out", delayMs: 300, headers: { order: "2" } });
      assert.ok(order.deliverAt.getTime() > Date.now(), "due in the future");
      const got: Delivery[] = [];
      await consumeUntil(c, topic("timeouts"), (d) => void got.push(d), () => got.length > 0);
      const [d] = got;
      assert.equal(d.id, order.id);
      assert.equal(text(d), "order 2 timed out");
      assert.equal(d.headers.order, "2");
      assert.equal(d.attempt, 0);
      assert.equal(d.deliverAt.getTime(), order.deliverAt.getTime());
      assert.ok(d.receivedAt >= d.deliverAt, `received ${d.receivedAt.toISOString()} before due ${d.deliverAt.toISOString()}`);
      // Truthful, never "cancelled": "already-delivered" while its bucket exists, "unknown" once
      // the server has retired it (this server's buckets are 2 s long; a bucket that is over
      // with nothing pending or in flight is retired, docs/DESIGN.md "Retire").
      const res = await c.cancel(order.id);
      assert.ok(res === "already-delivered" || res === "unknown", `cancel after delivery answered ${res}`);
      // Acked in the queue; Get tells "delivering" until the engine has recorded the hand-off.
      await waitFor("Get to tell acked", async () => (await c.get(order.id)).state === "acked");
    });

    test("a retry with backoff ends in the dead-letter topic", async () => {
      const m = await c.schedule({ topic: topic("payments"), body: "charge card" });
      const tries: Delivery[] = [];
      // Backoff doubles: 100 ms, then 200 ms. The server's --max-attempts is 3.
      const consuming = consumeUntil(c, topic("payments"), (d) => {
        tries.push(d);
        return retry(100 * 2 ** d.attempt, "card declined");
      }, () => tries.length === 3);
      const dead: Delivery[] = [];
      await consumeUntil(c, `${topic("payments")}.dlq`, (d) => void dead.push(d), () => dead.length > 0);
      await consuming;
      assert.deepEqual(tries.map((d) => d.attempt), [0, 1, 2]);
      for (const d of tries) assert.equal(d.originId, m.id);
      for (let i = 1; i < tries.length; i++) {
        const waited = tries[i].deliverAt.getTime() - tries[i - 1].receivedAt.getTime();
        assert.ok(waited >= 100 * 2 ** (i - 1), `attempt ${i} due ${waited}ms after the one before; its retry asked ${100 * 2 ** (i - 1)}ms`);
      }
      assert.equal(dead.length, 1);
      assert.equal(text(dead[0]), "charge card");
      assert.equal(dead[0].topic, `${topic("payments")}.dlq`);
    });

    test("a dead letter tells why it died", async () => {
      await c.schedule({ topic: topic("dl-info"), body: "x" });
      let tries = 0;
      await consumeUntil(c, topic("dl-info"), (d) => {
        tries++;
        return retry(1, d.attempt === 2 ? "still nope" : "nope");
      }, () => tries === 3);
      const dead: Delivery[] = [];
      await consumeUntil(c, `${topic("dl-info")}.dlq`, (d) => void dead.push(d), () => dead.length > 0);
      const info = dead[0].deadLetter;
      assert.ok(info, "the dead letter has no deadLetter: the server fills it on every dead letter");
      assert.equal(info.originTopic, topic("dl-info"));
      assert.equal(info.reason, "max-attempts");
      assert.equal(info.lastError, "still nope");
      assert.equal(info.attempts, 3);
    });

    test("edit replaces a pending message's body and headers, keeping its time and names", async () => {
      const m = await c.schedule({ topic: topic("edited"), body: "old", headers: { a: "1" }, delayMs: 3_600_000, key: "e-1" });
      const e = await c.edit({ topic: topic("edited"), key: "e-1" }, { body: "new", headers: { b: "2" } });
      assert.equal(e.result, "edited");
      if (e.result !== "edited") return;
      assert.notEqual(e.id, m.id);
      assert.equal(e.deliverAt.getTime(), m.deliverAt.getTime());
      const f = await c.get(m.id);
      assert.equal(f.state, "pending");
      assert.equal(f.message?.id, e.id);
      assert.equal(text(f.message!), "new");
      assert.equal(f.message?.headers.b, "2");
      assert.equal(f.message?.headers.a, undefined);
      const body = await c.edit(m.id, { body: "newer" }); // headers kept
      assert.equal(body.result, "edited");
      assert.equal((await c.get(m.id)).message?.headers.b, "2");
      assert.equal(await c.cancel(m.id), "cancelled");
      assert.deepEqual(await c.edit(m.id, { body: "late" }), { result: "already-cancelled" });
      assert.deepEqual(await c.edit("0000ffffffffffff0000000000000001", { body: "x" }), { result: "unknown" });
      await assert.rejects(c.edit(m.id, {}), /give a new body, new headers, or both/);
    });

    test("freezeMessage holds a pending message with its remaining delay until thawMessage", async () => {
      const m = await c.schedule({ topic: topic("frozen"), body: "b", delayMs: 3_600_000, key: "f-1" });
      const fr = await c.freezeMessage({ topic: topic("frozen"), key: "f-1" });
      assert.equal(fr.result, "frozen");
      if (fr.result !== "frozen") return;
      assert.notEqual(fr.id, m.id);
      assert.ok(fr.remainingMs > 3_500_000 && fr.remainingMs <= 3_600_000, `remainingMs ${fr.remainingMs}`);
      const f = await c.get(m.id);
      assert.equal(f.state, "pending");
      assert.equal(f.message?.id, fr.id);
      assert.equal(f.message?.frozen, true);
      assert.equal(f.message?.frozenRemainingMs, fr.remainingMs);
      assert.deepEqual(await c.freezeMessage(m.id), { result: "already-frozen" });
      const before = Date.now();
      const th = await c.thawMessage(m.id);
      assert.equal(th.result, "thawed");
      if (th.result !== "thawed") return;
      assert.ok(th.deliverAt.getTime() >= before + fr.remainingMs - 1000, `thawed to ${th.deliverAt.toISOString()}`);
      const g = await c.get({ topic: topic("frozen"), key: "f-1" });
      assert.equal(g.message?.id, th.id);
      assert.equal(g.message?.frozenRemainingMs, undefined);
      assert.deepEqual(await c.thawMessage(m.id), { result: "not-frozen" });
      assert.equal(await c.cancel(m.id), "cancelled");
      assert.deepEqual(await c.freezeMessage(m.id), { result: "already-cancelled" });
      assert.deepEqual(await c.thawMessage("0000ffffffffffff0000000000000001"), { result: "unknown" });
    });

    test("a message past its expiry is dead-lettered with reason expired, never delivered", async () => {
      const at = new Date(Date.now() - 10_000);
      await c.schedule({ topic: topic("expired"), body: "stale", at, ttlMs: 1 });
      const fresh = await c.schedule({ topic: topic("expired"), body: "fresh", ttlMs: 3_600_000 });
      const got: Delivery[] = [];
      await consumeUntil(c, topic("expired"), (d) => void got.push(d), () => got.length > 0);
      assert.deepEqual(got.map(text), ["fresh"]);
      assert.equal(got[0].id, fresh.id);
      const dead: Delivery[] = [];
      await consumeUntil(c, `${topic("expired")}.dlq`, (d) => void dead.push(d), () => dead.length > 0);
      assert.equal(text(dead[0]), "stale");
      assert.equal(dead[0].deadLetter?.reason, "expired");
      await assert.rejects(c.schedule({ topic: topic("expired"), ttlMs: 1, expireAt: new Date() }), /at most one of them/);
      await assert.rejects(c.schedule({ topic: topic("expired"), ttlMs: 0 }), /ttlMs 0/);
    });

    test("a push at an absolute time", async () => {
      const at = new Date(Date.now() + 500);
      const push = await c.schedule({ topic: topic("push"), body: "reminder", at });
      assert.equal(push.deliverAt.getTime(), at.getTime());
      const got: Delivery[] = [];
      await consumeUntil(c, topic("push"), (d) => void got.push(d), () => got.length > 0);
      assert.equal(got[0].id, push.id);
      assert.ok(got[0].receivedAt >= at, `received ${got[0].receivedAt.toISOString()}, before ${at.toISOString()}`);
    });

    test("a handler that throws has its message back as the next attempt", async () => {
      await c.schedule({ topic: topic("flaky"), body: "x" });
      const got: Delivery[] = [];
      await consumeUntil(c, topic("flaky"), (d) => {
        got.push(d);
        if (d.attempt === 0) throw new Error("flaky");
      }, () => got.length === 2);
      assert.deepEqual(got.map((d) => d.attempt), [0, 1]);
      assert.equal(got[1].originId, got[0].id);
    });

    test("deadLetter sends the message to <topic>.dlq at once", async () => {
      const m = await c.schedule({ topic: topic("poison"), body: "not json" });
      let handled = 0;
      await consumeUntil(c, topic("poison"), () => {
        handled++;
        return deadLetter("unparsable");
      }, () => handled === 1);
      // The nack is answered before consume returns: the message is dead-lettered by now, not
      // due again in its topic.
      const again = await c.receive(topic("poison"), { waitMs: 300 });
      assert.deepEqual(again.map((d) => d.id), [], `${m.id} came back in its topic after deadLetter`);
      assert.equal(handled, 1);
      const dead = await c.receive(`${topic("poison")}.dlq`, { waitMs: 5000 });
      assert.equal(dead.length, 1);
      assert.equal(text(dead[0]), "not json");
      assert.equal(dead[0].deadLetter?.reason, "nacked");
      assert.equal(dead[0].deadLetter?.lastError, "unparsable");
    });

    test("concurrency bounds the handlers running at once", async () => {
      const n = 8;
      const limit = 3;
      await c.scheduleBatch(Array.from({ length: n }, (_, i) => ({ topic: topic("bounded"), body: `m${i}` })));
      let running = 0;
      let most = 0;
      let handled = 0;
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      const consuming = consumeUntil(c, topic("bounded"), async () => {
        running++;
        most = Math.max(most, running);
        if (running === limit) open();
        await gate;
        running--;
        handled++;
      }, () => handled === n, limit);
      await consuming;
      assert.equal(most, limit);
    });

    test("scheduleBatch and get", async () => {
      const [a, b] = await c.scheduleBatch([
        { topic: topic("batch"), body: "a", delayMs: 60_000 },
        { topic: topic("batch"), body: new Uint8Array([0xff]), level: 1, headers: { k: "v" } },
      ]);
      assert.notEqual(a.id, b.id);
      const f = await c.get(b.id);
      assert.equal(f.state, "pending");
      assert.deepEqual(f.message?.body, new Uint8Array([0xff]));
      assert.equal(f.message?.headers.k, "v");
      assert.equal((await c.get("0000ffffffffffff0000000000000001")).state, "not-found");
      for (const s of [a, b]) assert.equal(await c.cancel(s.id), "cancelled");
    });

    test("reschedule moves a pending message", async () => {
      const m = await c.schedule({ topic: topic("moved"), body: "moved", delayMs: 3_600_000 });
      const r = await c.reschedule(m.id, { delayMs: 60_000 }); // still pending at the get below, however loaded the machine
      assert.equal(r.result, "rescheduled");
      if (r.result !== "rescheduled") return;
      assert.notEqual(r.id, m.id);
      // The first ID names the message for its whole life: Get says what
      // carries it now, and Reschedule by it moves that one.
      const f = await c.get(m.id);
      assert.equal(f.state, "pending");
      assert.equal(f.rescheduledTo, r.id);
      assert.equal(f.message?.id, r.id);
      const r2 = await c.reschedule(m.id, { now: true });
      assert.equal(r2.result, "rescheduled");
      if (r2.result !== "rescheduled") return;
      assert.notEqual(r2.id, r.id);
      const got: Delivery[] = [];
      await consumeUntil(c, topic("moved"), (d) => void got.push(d), () => got.length > 0);
      assert.equal(got[0].id, r2.id);
      assert.equal(got[0].originId, m.id);
      // As for Cancel: "unknown" once the delivered message's 2 s bucket is retired.
      const again = (await c.reschedule(r.id, { at: new Date(Date.now() + 60_000) })).result;
      assert.ok(again === "already-delivered" || again === "unknown", `reschedule after delivery answered ${again}`);
      assert.deepEqual(await c.reschedule("0000ffffffffffff0000000000000001", { now: true }), { result: "unknown" });
    });

    test("cancel and get by topic and key", async () => {
      const m = await c.schedule({ topic: topic("keyed"), delayMs: 3_600_000, key: "order-42" });
      const ref = { topic: topic("keyed"), key: "order-42" };
      const f = await c.get(ref);
      assert.equal(f.state, "pending");
      assert.equal(f.message?.id, m.id);
      assert.equal(await c.cancel(ref), "cancelled");
      assert.equal(await c.cancel(m.id), "already-cancelled");
    });

    test("consume runs on a Consume stream where the transport carries one, else on Receive", async () => {
      // Which path consume took, read from the server's per-RPC counters (grpc_server_started_total
      // by method): a regression to polling on HTTP/2 would still deliver, so only this shows it.
      const streams = name === "node-grpc" || name.endsWith("-h2");
      assert.equal(c.streams, streams, `${name}: client's streams flag`);
      const before = { consume: await started("Consume"), receive: await started("Receive") };
      await c.schedule({ topic: topic("path"), body: "one" });
      const got: Delivery[] = [];
      await consumeUntil(c, topic("path"), (d) => void got.push(d), () => got.length >= 1);
      const consume = (await started("Consume")) - before.consume;
      const receive = (await started("Receive")) - before.receive;
      if (streams) {
        assert.ok(consume >= 1, `${name}: no Consume stream opened`);
        assert.equal(receive, 0, `${name}: consume polled with Receive on a transport that streams`);
      } else {
        assert.equal(consume, 0, `${name}: a Consume stream on a transport without bidirectional streams`);
        assert.ok(receive >= 1, `${name}: no Receive call`);
      }
    });

    test("a stream's default credits: at least 100 leased to one handler", { skip: !(name === "node-grpc" || name.endsWith("-h2")) && "no Consume stream on this transport" }, async () => {
      // 150 due at once and a handler that holds the first: the server leases as many as the stream
      // opens with, in one batch, and no more (a held handler settles nothing, so the window does
      // not grow). Read from topics().
      const t = topic("credits");
      await c.scheduleBatch(Array.from({ length: 150 }, (_, i) => ({ topic: t, body: `m${i}` })));
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const stop = new AbortController();
      const running = c.consume(t, () => gate, { signal: stop.signal });
      try {
        let info: TopicInfo | undefined;
        await waitFor("100 messages leased to the consumer", async () => {
          info = (await c.topics()).find((x) => x.topic === t);
          return (info?.leased ?? 0) >= 100;
        }, 10000);
        assert.equal(info?.leased, 100, "leased to one consumer with default options");
        assert.equal(info?.due, 50, "left due");
      } finally {
        release();
        stop.abort();
        await running;
      }
    });

    test("a stream's window grows past 100 while handlers keep up", { skip: !(name === "node-grpc" || name.endsWith("-h2")) && "no Consume stream on this transport" }, async () => {
      // 1,500 due at once; the handler acks the first 400 at once, then holds: by then the window
      // has grown with the settles, and the server leases what it holds, more than the 100 a
      // stream opens with and at most the 1,000 it may grow to.
      const t = topic("window");
      for (let k = 0; k < 1500; k += 500) await c.scheduleBatch(Array.from({ length: 500 }, (_, i) => ({ topic: t, body: `m${k + i}` })));
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const stop = new AbortController();
      let handled = 0;
      const running = c.consume(t, () => (++handled <= 400 ? undefined : gate), { signal: stop.signal });
      try {
        let info: TopicInfo | undefined;
        await waitFor("more than 100 leased once 400 are acked", async () => {
          info = (await c.topics()).find((x) => x.topic === t);
          return handled > 400 && (info?.leased ?? 0) > 100;
        }, 10000);
        assert.ok((info?.leased ?? 0) <= 1000, `${info?.leased} leased: more than the window's 1,000`);
      } finally {
        release();
        stop.abort();
        await running;
      }
    });

    test("errors keep their codes", async () => {
      await assert.rejects(c.schedule({ topic: "no spaces" }), (e: unknown) => ConnectError.from(e).code === Code.InvalidArgument && /topic/.test(String(e)));
      await assert.rejects(c.schedule({ topic: topic("x"), delayMs: 1, level: 1 }), TypeError);
      const anon = clientsOf(undefined)[name]();
      try {
        await assert.rejects(anon.schedule({ topic: topic("x") }), (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated);
      } finally {
        anon.close();
      }
      await assert.rejects(
        c.consume("bad topic", () => undefined, { waitMs: 100 }),
        (e: unknown) => ConnectError.from(e).code === Code.InvalidArgument,
      );
    });
  });
}
