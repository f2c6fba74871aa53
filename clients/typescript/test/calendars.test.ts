// Calendars, messages in working time, and recurring schedules' calendar, jitter, overlap and
// backfill against the real server, over gRPC from Node and Connect (JSON) from the browser
// transport.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, type Calendar, type HourglassClient, type Weekday } from "../src/index.js";
import { createNodeClient } from "../src/node.js";
import { createWebClient } from "../src/web.js";
import { startServer, type Server } from "./server.js";

let server: Server;

before(async () => {
  server = await startServer([]);
});
after(async () => {
  await server?.stop();
});

const clients: Record<string, () => HourglassClient> = {
  "node-grpc": () => createNodeClient(server.url, { protocol: "grpc" }),
  "web-connect": () => createWebClient(server.url, { protocol: "connect" }),
};

const rejectsWith = (p: Promise<unknown>, code: Code, re?: RegExp) =>
  assert.rejects(p, (e: unknown) => {
    const ce = ConnectError.from(e);
    return ce.code === code && (!re || re.test(ce.message));
  });

// Today (UTC) at 00:00, and dates and times from it.
const day = new Date(Math.floor(Date.now() / 86400000) * 86400000);
const date = (n: number) => new Date(day.getTime() + n * 86400000).toISOString().slice(0, 10);
const at = (n: number, hours: number) => new Date(day.getTime() + n * 86400000 + hours * 3600000);
const week: Weekday[] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

for (const [name, make] of Object.entries(clients)) {
  describe(name, () => {
    let c: HourglassClient;
    before(() => {
      c = make();
    });
    after(() => c.close());

    test("calendars, a message in working time, a schedule keeping to one", async () => {
      // 09:00-17:00 UTC every day, except tomorrow.
      const ops: Calendar = { name: `${name}.ops`, hours: week.map((d) => ({ day: d, start: "09:00", end: "17:00" })), closed: [date(1)] };
      await c.createCalendar(ops);
      await rejectsWith(c.createCalendar(ops), Code.AlreadyExists);
      await rejectsWith(c.createCalendar({ ...ops, name: `${name}.bad`, timeZone: "Mars/Olympus" }), Code.InvalidArgument, /Mars\/Olympus/);
      await rejectsWith(c.createCalendar({ ...ops, name: `${name}.bad`, hours: [{ day: "mon", start: "17:00", end: "09:00" }] }), Code.InvalidArgument, /17:00/);
      await assert.rejects(c.createCalendar({ ...ops, hours: [{ day: "someday" as Weekday, start: "09:00", end: "17:00" }] }), TypeError);
      await c.createCalendar({ name: `${name}.berlin`, timeZone: "Europe/Berlin", hours: [{ day: "sat", start: "10:00", end: "14:00" }] });
      assert.deepEqual(await c.getCalendar(ops.name), { ...ops, timeZone: "" });
      const listed: string[] = [];
      for await (const cal of c.listCalendars({ pageSize: 1 })) if (cal.name.startsWith(`${name}.`)) listed.push(cal.name);
      assert.deepEqual(listed, [`${name}.berlin`, `${name}.ops`]);
      await rejectsWith(c.getCalendar(`${name}.nope`), Code.NotFound);

      // From today 12:00: tomorrow is closed.
      const after = at(0, 12);
      const days = await c.schedule({ topic: `${name}.w`, working: { calendar: ops.name, days: 2, atTime: "10:30", after } });
      assert.equal(days.deliverAt.getTime(), at(3, 10.5).getTime());
      const hours = await c.schedule({ topic: `${name}.w`, working: { calendar: ops.name, durationMs: 10 * 3600000, after } });
      assert.equal(hours.deliverAt.getTime(), at(2, 14).getTime());
      const [batched] = await c.scheduleBatch([{ topic: `${name}.w`, working: { calendar: ops.name, days: 1, after } }]);
      assert.equal(batched.deliverAt.getTime(), at(2, 12).getTime());
      await assert.rejects(c.schedule({ topic: "t", working: { calendar: ops.name, days: 1, durationMs: 1 } }), TypeError);
      await assert.rejects(c.schedule({ topic: "t", delayMs: 1, working: { calendar: ops.name, days: 1 } }), TypeError);
      await assert.rejects(c.schedule({ topic: "t", working: { calendar: ops.name, durationMs: 1, atTime: "09:00" } }), TypeError);
      await rejectsWith(c.schedule({ topic: "t", working: { calendar: `${name}.nope`, days: 1 } }), Code.InvalidArgument, /no such calendar/);

      // The day after tomorrow closed too: what is stored keeps its time.
      await c.updateCalendar({ ...ops, closed: [date(1), date(2)] });
      assert.equal((await c.get(hours.id)).message?.deliverAt?.getTime(), at(2, 14).getTime());
      assert.equal((await c.schedule({ topic: `${name}.w`, working: { calendar: ops.name, days: 1, after } })).deliverAt.getTime(), at(3, 12).getTime());

      // 08:00 every day, shifted to the next working instant (09:00), never on a closed day.
      const sched = `${name}.eight`;
      await c.createSchedule({ name: sched, topic: `${name}.r`, spec: "0 8 * * *", calendar: ops.name, calendarPolicy: "shift", jitterMs: 90000, overlap: "buffer-one" });
      const info = await c.getSchedule(sched, { next: 5 });
      assert.deepEqual(
        { jitterMs: info.schedule.jitterMs, overlap: info.schedule.overlap, calendar: info.schedule.calendar, calendarPolicy: info.schedule.calendarPolicy, skipped: info.skipped },
        { jitterMs: 90000, overlap: "buffer-one", calendar: ops.name, calendarPolicy: "shift", skipped: 0 },
      );
      for (const t of info.next) {
        assert.equal(t.getUTCHours(), 9, `next ${t.toISOString()}`);
        assert.ok(![date(1), date(2)].includes(t.toISOString().slice(0, 10)), `next ${t.toISOString()} on a closed day`);
      }
      await assert.rejects(c.createSchedule({ name: "x", topic: "t", spec: "@daily", overlap: "queue" as "skip" }), TypeError);
      await rejectsWith(c.deleteCalendar(ops.name), Code.FailedPrecondition, new RegExp(sched));
      await c.updateSchedule({ name: sched, topic: `${name}.r`, spec: "0 8 * * *" });
      const plain = (await c.getSchedule(sched)).schedule;
      assert.deepEqual([plain.jitterMs, plain.overlap, plain.calendar, plain.calendarPolicy], [0, "allow", "", undefined]);
      await c.deleteCalendar(ops.name);
      await rejectsWith(c.getCalendar(ops.name), Code.NotFound);
      await c.deleteSchedule(sched);
    });

    test("backfill stores a past span's occurrences once", async () => {
      const sched = `${name}.bf`;
      await c.createSchedule({ name: sched, topic: `${name}.bf`, spec: "* * * * * *", paused: true });
      const now = Math.floor(Date.now() / 1000) * 1000;
      const from = new Date(now - 10000);
      assert.deepEqual(await c.backfillSchedule(sched, from, new Date(now - 5000)), { stored: 5, existing: 0 });
      assert.deepEqual(await c.backfillSchedule(sched, from, new Date(now - 4000)), { stored: 1, existing: 5 });
      await rejectsWith(c.backfillSchedule(sched, from, new Date(Date.now() + 3600000)), Code.InvalidArgument, /after now/);
      await rejectsWith(c.backfillSchedule(`${name}.nope`, from, new Date(now - 5000)), Code.NotFound);
      // receive answers what is due, perhaps not all 6 at once.
      const ds = [];
      const deadline = Date.now() + 20000;
      while (ds.length < 6 && Date.now() < deadline) ds.push(...(await c.receive(`${name}.bf`, { maxMessages: 10, waitMs: 1000 })));
      assert.equal(ds.length, 6);
      for (const d of ds) assert.ok("hourglass-backfill" in d.headers, `headers ${JSON.stringify(d.headers)}`);
      await c.deleteSchedule(sched);
    });
  });
}
