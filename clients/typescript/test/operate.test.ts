// The management calls against the real server: recurring schedules (created, seen firing,
// paused, resumed, updated, deleted), a topic's pause and policy, redrive, purge and deleteTopic,
// over gRPC from Node and Connect (JSON) from the browser transport. Every wait has a deadline;
// the one wait for nothing to come (a paused schedule, a paused topic) is a long poll.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, type Delivery, type HourglassClient, type MisfirePolicy } from "../src/index.js";
import { createNodeClient } from "../src/node.js";
import { createWebClient } from "../src/web.js";
import { startServer, waitFor, type Server } from "./server.js";

let server: Server;

before(async () => {
  server = await startServer(["--max-attempts", "3", "--segment-duration", "2s"]);
});
after(async () => {
  await server?.stop();
});

const clients: Record<string, () => HourglassClient> = {
  "node-grpc": () => createNodeClient(server.url, { protocol: "grpc" }),
  "web-connect": () => createWebClient(server.url, { protocol: "connect" }),
};

const text = (d: { body: Uint8Array }) => new TextDecoder().decode(d.body);

/** Receives and acks n messages of topic, failing after a deadline. */
async function receiveN(c: HourglassClient, topic: string, n: number): Promise<Delivery[]> {
  const got: Delivery[] = [];
  const deadline = Date.now() + 20000;
  while (got.length < n) {
    if (Date.now() > deadline) throw new Error(`${topic}: ${got.length} of ${n} messages in 20 s`);
    const ds = await c.receive(topic, { maxMessages: n - got.length, waitMs: 1000 });
    for (const d of ds) await c.ack(d);
    got.push(...ds);
  }
  return got;
}

/** The time an occurrence's hourglass-occurrence header names. */
const occurrenceOf = (d: Delivery) => new Date(d.headers["hourglass-occurrence"]);

const rejectsWith = (p: Promise<unknown>, code: Code, re?: RegExp) =>
  assert.rejects(p, (e: unknown) => {
    const ce = ConnectError.from(e);
    return ce.code === code && (!re || re.test(ce.message));
  });

for (const [name, make] of Object.entries(clients)) {
  describe(name, () => {
    let c: HourglassClient;
    const topic = (t: string) => `${name}.${t}`;
    before(() => {
      c = make();
    });
    after(() => c.close());

    test("a recurring schedule fires, pauses, resumes, changes and is deleted", async () => {
      const sched = `${name}-tick`;
      const t = topic("ticks");
      const first = await c.createSchedule({ name: sched, topic: t, spec: "@every 1s", body: "tick", headers: { k: "v" } });
      assert.ok(first && first.getTime() > Date.now() - 1000 && first.getTime() <= Date.now() + 1000, `first occurrence ${first?.toISOString()}`);
      await rejectsWith(c.createSchedule({ name: sched, topic: t, spec: "@hourly" }), Code.AlreadyExists);
      await rejectsWith(c.createSchedule({ name: `${sched}-bad`, topic: t, spec: "61 * * * *" }), Code.InvalidArgument, /want 5 fields/);
      await rejectsWith(c.createSchedule({ name: `${sched}-bad`, topic: t, spec: "@daily", timeZone: "Mars/Base" }), Code.InvalidArgument, /IANA/);
      await assert.rejects(c.createSchedule({ name: `${sched}-bad`, topic: t, spec: "@daily", misfire: "sometimes" as MisfirePolicy }), TypeError);

      const ds = await receiveN(c, t, 2);
      assert.notEqual(ds[0].id, ds[1].id);
      for (const d of ds) {
        assert.equal(text(d), "tick");
        assert.equal(d.headers.k, "v");
        assert.equal(d.headers["hourglass-schedule"], sched);
        assert.equal(d.deliverAt.getTime(), occurrenceOf(d).getTime());
      }

      let info = await c.getSchedule(sched, { next: 3 });
      assert.equal(info.next.length, 3);
      assert.equal(info.next[1].getTime() - info.next[0].getTime(), 1000);
      assert.match(info.armedId ?? "", /^[0-9a-f]{32}$/);
      assert.ok(info.fired >= 2, `fired ${info.fired}`);
      assert.deepEqual({ ...info.schedule, body: text(info.schedule) }, {
        name: sched, topic: t, spec: "@every 1s", timeZone: "", body: "tick", headers: { k: "v" }, misfire: "fire-latest", paused: false,
        jitterMs: 0, overlap: "allow", calendar: "",
      });
      const listed: string[] = [];
      for await (const s of c.listSchedules({ topic: t, pageSize: 1 })) listed.push(s.schedule.name);
      assert.deepEqual(listed, [sched]);

      // Paused: the occurrences fired before are received, then none comes and fired stays.
      await c.pauseSchedule(sched);
      const paused = Date.now();
      info = await c.getSchedule(sched);
      assert.equal(info.schedule.paused, true);
      assert.deepEqual(info.next, []);
      assert.equal(info.armedId, undefined);
      await receiveN(c, t, info.fired - ds.length);
      assert.deepEqual(await c.receive(t, { waitMs: 2000 }), []);
      assert.equal((await c.getSchedule(sched)).fired, info.fired);

      const next = await c.resumeSchedule(sched);
      assert.ok(next && next.getTime() > paused);
      const [again] = await receiveN(c, t, 1);
      assert.ok(occurrenceOf(again).getTime() > paused, `occurrence ${occurrenceOf(again).toISOString()} before the resume`);

      const start = new Date(Date.now() + 3_600_000);
      const end = new Date(Date.now() + 30 * 86_400_000);
      await c.updateSchedule({ name: sched, topic: t, spec: "0 3 * * *", timeZone: "Europe/Berlin", start, end, misfire: "skip", body: new Uint8Array([0xff]) });
      info = await c.getSchedule(sched, { next: 2 });
      assert.equal(info.schedule.spec, "0 3 * * *");
      assert.equal(info.schedule.timeZone, "Europe/Berlin");
      assert.equal(info.schedule.misfire, "skip");
      assert.equal(info.schedule.start?.getTime(), start.getTime());
      assert.equal(info.schedule.end?.getTime(), end.getTime());
      assert.deepEqual(info.schedule.headers, {});
      assert.deepEqual(info.schedule.body, new Uint8Array([0xff]));
      assert.ok(info.fired > 2);
      for (const n of info.next) {
        const hour = new Intl.DateTimeFormat("en-GB", { timeZone: "Europe/Berlin", hour: "2-digit", minute: "2-digit" }).format(n);
        assert.equal(hour, "03:00", `next ${n.toISOString()} in Berlin`);
      }
      // The armed occurrence is a pending message keyed "<name>@<time>": cancelling it skips it.
      const key = { topic: t, key: `${sched}@${info.next[0].toISOString()}` };
      const f = await c.get(key);
      assert.equal(f.state, "pending");
      assert.equal(f.message?.id, info.armedId);
      assert.equal(f.message?.headers["hourglass-schedule"], sched);
      assert.equal(await c.cancel(key), "cancelled");

      await c.deleteSchedule(sched);
      await rejectsWith(c.getSchedule(sched), Code.NotFound, new RegExp(sched));
      await rejectsWith(c.pauseSchedule(sched), Code.NotFound);
    });

    test("a paused topic hands out nothing until resumed; its policy is set and reset", async () => {
      const t = topic("paused");
      let p = await c.pause(t);
      assert.equal(p.policy.paused, true);
      assert.equal(p.effective.paused, true);
      const m = await c.schedule({ topic: t, body: "waits" });
      await waitFor("the message to be due", async () => (await c.topics()).some((ti) => ti.topic === t && ti.due === 1));
      const info = (await c.topics()).find((ti) => ti.topic === t);
      assert.equal(info?.policy.paused, true);
      assert.deepEqual(await c.receive(t, { waitMs: 300 }), []);
      p = await c.resume(t);
      assert.equal(p.policy.paused, undefined);
      assert.equal(p.effective.paused, false);
      const [d] = await receiveN(c, t, 1);
      assert.equal(d.id, m.id);

      p = await c.setPolicy(t, { maxAttempts: 5, backoff: { initialMs: 1000, maxMs: 60_000, multiplier: 2 }, leaseMs: 30_000, maxDispatchRate: 50 });
      assert.deepEqual(p.policy, {
        maxAttempts: 5, backoff: { initialMs: 1000, maxMs: 60_000, multiplier: 2, jitter: 0 }, leaseMs: 30_000, maxDispatchRate: 50,
      });
      assert.deepEqual((await c.getPolicy(t)).policy, p.policy);
      p = await c.setPolicy(t, {}, ["maxAttempts", "maxDispatchRate"]);
      assert.equal(p.policy.maxAttempts, undefined);
      assert.equal(p.effective.maxAttempts, 3); // the server's --max-attempts
      assert.equal(p.effective.maxDispatchRate, 0);
      assert.equal(p.policy.leaseMs, 30_000);
      await assert.rejects(c.setPolicy(t, { leaseMs: 1.5 }), TypeError);
      await rejectsWith(c.setPolicy(t, { maxAttempts: 1001 }), Code.InvalidArgument);
    });

    test("a frozen pause stops a topic's clock: get counts it, resume ends it", async () => {
      const t = topic("frozen");
      const m = await c.schedule({ topic: t, body: "later", delayMs: 3_600_000 });
      let p = await c.freeze(t);
      assert.equal(p.effective.freeze, true);
      assert.equal(p.effective.paused, true);
      assert.equal(p.freezes.length, 1);
      assert.equal(p.freezes[0].endedAt, undefined);
      // The freeze counts whole milliseconds: wait until get sees one pass.
      await waitFor("get to count the freeze", async () => {
        const f = await c.get(m.id);
        return f.message?.frozen === true && f.message.dueAt !== undefined && f.message.dueAt > f.message.deliverAt!;
      });
      p = await c.resume(t);
      assert.equal(p.effective.freeze, false);
      assert.equal(p.effective.paused, false);
      const fz = p.freezes[0];
      assert.ok(fz.endedAt);
      const f = await c.get(m.id);
      assert.equal(f.message?.frozen, false);
      assert.equal(f.message?.dueAt?.getTime(), f.message!.deliverAt!.getTime() + (fz.endedAt!.getTime() - fz.beganAt.getTime()));
    });

    test("get of the first id after three nacks under a backoff policy: dead-lettered, with why", async () => {
      const t = topic("retried");
      await c.setPolicy(t, { maxAttempts: 3, backoff: { initialMs: 50, maxMs: 50, multiplier: 1 } });
      const m = await c.schedule({ topic: t, body: "job" });
      let last = "";
      for (let attempt = 0; attempt < 3; attempt++) {
        const [d] = await c.receive(t, { waitMs: 10_000 });
        assert.equal(d?.attempt, attempt);
        assert.equal(d.originId, m.id);
        await c.nack(d, { reason: "boom" });
        last = d.id;
      }
      const f = await c.get(m.id);
      assert.equal(f.state, "dead-lettered");
      assert.equal(f.deadLetterTopic, `${t}.dlq`);
      assert.equal(f.rescheduledTo, last);
      assert.equal(f.message?.deadLetter?.reason, "max-attempts");
      assert.equal(f.message?.deadLetter?.lastError, "boom");
      assert.equal(f.message?.deadLetter?.attempts, 3);
    });

    test("redrive moves dead letters back; purge and deleteTopic remove what a topic holds", async () => {
      const t = topic("dl");
      const m = await c.schedule({ topic: t, body: "poison" });
      const [d] = await c.receive(t, { waitMs: 5000 });
      assert.equal(d?.id, m.id);
      await c.nack(d, { deadLetter: true, reason: "bad input" });
      await waitFor("the dead letter to be counted", async () => (await c.topics()).some((ti) => ti.topic === t && ti.deadLettered === 1));
      assert.deepEqual(await c.redrive(`${t}.dlq`, { reason: "max-attempts" }), { redriven: 0, skipped: 1, more: false });
      assert.deepEqual(await c.redrive(`${t}.dlq`, { ratePerSecond: 100 }), { redriven: 1, skipped: 0, more: false });
      const [back] = await receiveN(c, t, 1);
      assert.equal(back.originId, m.id);
      assert.equal(back.attempt, 0);
      assert.equal(text(back), "poison");

      const p = topic("purged");
      await c.scheduleBatch([{ topic: p, delayMs: 3_600_000 }, { topic: p, delayMs: 3_600_000 }]);
      assert.equal(await c.purge(p, "pending"), 2);
      assert.equal(await c.purge(p, "pending"), 0);
      await assert.rejects(c.purge(p, "leased" as "due"), TypeError);

      const x = topic("deleted");
      await c.schedule({ topic: x, delayMs: 3_600_000 });
      await c.schedule({ topic: x, body: "due" });
      await waitFor("the message to be due", async () => (await c.topics()).some((ti) => ti.topic === x && ti.due === 1));
      assert.deepEqual(await c.deleteTopic(x), { cancelled: 1, removed: 1 });
      const left = (await c.topics()).find((ti) => ti.topic === x);
      assert.ok(!left || (left.due === 0 && left.leased === 0), `after deleteTopic: ${JSON.stringify(left)}`);
    });
  });
}
