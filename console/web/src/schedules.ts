// Schedules: the recurring schedules with their next fire times; create,
// pause, resume and delete.

import { api, call, CalendarPolicy, MisfirePolicy, OverlapPolicy, type GetScheduleResponse, type ListSchedulesResponse, type RecurringSchedule } from "./api.js";
import { enumName } from "./detail.js";
import { busy, confirm, failed, field, fill, h, notify, row, table, unavailable } from "./dom.js";
import { duration, num, parseDuration, shortId, time } from "./format.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { go, type Page } from "./page.js";

export function schedulesPage(params: URLSearchParams): Page {
  const topic = params.get("topic") ?? "";
  const topicIn = h("input", { id: "sch-filter", value: topic, placeholder: "all topics" });
  const filter = h("form", { class: "toolbar" }, h("label", null, h("span", null, "Topic"), topicIn), h("button", { type: "submit" }, "Show"));
  filter.addEventListener("submit", (ev) => {
    ev.preventDefault();
    go("schedules", topicIn.value.trim() ? { topic: topicIn.value.trim() } : {});
  });

  const create = h("form", { id: "sch-form", class: "grid-form", "data-verb": "schedule" },
    h("label", null, h("span", null, "Name"), field({ name: "name", required: true, placeholder: "daily-report" })),
    h("label", null, h("span", null, "Topic"), field({ name: "topic", required: true, placeholder: "reports", value: topic })),
    h("label", null, h("span", null, "When"), field({ name: "spec", required: true, placeholder: "0 9 * * MON-FRI, @every 90s, @daily" })),
    h("label", null, h("span", null, "Time zone"), field({ name: "tz", placeholder: "UTC, Europe/Berlin" })),
    h("label", null, h("span", null, "Missed while down"), field({
      name: "misfire", value: String(MisfirePolicy.FIRE_LATEST),
      options: [MisfirePolicy.FIRE_LATEST, MisfirePolicy.FIRE_ALL, MisfirePolicy.SKIP].map((p): [string, string] => [String(p), enumName(MisfirePolicy, p, "").toLowerCase().replace(/_/g, " ")]),
    })),
    h("label", null, h("span", null, "Jitter (up to)"), field({ name: "jitter", placeholder: "none, 30s, 5m" })),
    h("label", null, h("span", null, "While the previous is not acked"), field({
      name: "overlap", value: String(OverlapPolicy.ALLOW),
      options: [[String(OverlapPolicy.ALLOW), "deliver anyway"], [String(OverlapPolicy.SKIP), "skip it"], [String(OverlapPolicy.BUFFER_ONE), "hold one until acked"]],
    })),
    h("label", null, h("span", null, "Calendar"), field({ name: "calendar", placeholder: "none (see Calendars)" })),
    h("label", null, h("span", null, "Outside working time"), field({
      name: "outside", value: String(CalendarPolicy.SKIP),
      options: [[String(CalendarPolicy.SKIP), "skip it"], [String(CalendarPolicy.SHIFT), "shift to the next working instant"]],
    })),
    h("label", { class: "wide" }, h("span", null, "Body"), field({ name: "body", type: "textarea", placeholder: "{\"report\": \"daily\"}" })),
    h("div", null, h("button", { type: "submit", id: "sch-create" }, "Create schedule")));
  create.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const v = (n: string) => (create.elements.namedItem(n) as HTMLInputElement).value;
    const jitter = v("jitter").trim() ? parseDuration(v("jitter")) : 0;
    if (Number.isNaN(jitter)) {
      failed(new Error(`Jitter "${v("jitter")}": want a duration such as 30s, 5m or 1h`));
      return;
    }
    const calendar = v("calendar").trim();
    await busy(create.querySelector("button[type=submit]"), async () => {
      try {
        const res = await call("CreateSchedule", () => api.createSchedule({
          schedule: {
            name: v("name").trim(), topic: v("topic").trim(), spec: v("spec").trim(), timeZone: v("tz").trim(),
            body: new TextEncoder().encode(v("body")), misfirePolicy: Number(v("misfire")) as MisfirePolicy,
            jitterMs: BigInt(Math.round(jitter)), overlapPolicy: Number(v("overlap")) as OverlapPolicy,
            calendar, calendarPolicy: calendar ? (Number(v("outside")) as CalendarPolicy) : CalendarPolicy.UNSPECIFIED,
          },
        }));
        notify("ok", `Created ${v("name").trim()}${res.next ? `; next at ${time(timestampDate(res.next))}` : ""}`);
        create.reset();
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  });

  const listEl = h("div", { id: "sch-list" }, "Loading…");
  let token = "";
  let next = "";
  const pager = h("div", { class: "toolbar pager" },
    h("button", { type: "button", class: "small", onclick: () => { token = ""; void refresh(); } }, "First page"),
    h("button", { type: "button", class: "small", id: "sch-next", disabled: true, onclick: () => { token = next; void refresh(); } }, "Next page"));
  const el = h("div", { class: "page schedules" },
    h("section", { class: "card wide" }, h("h2", null, "New recurring schedule"), create),
    h("section", { class: "card wide" }, h("h2", null, "Recurring schedules"), filter, listEl, pager));

  async function refresh(): Promise<void> {
    let res: ListSchedulesResponse;
    try {
      res = await call("ListSchedules", () => api.listSchedules({ topic, pageToken: token, pageSize: 100 }));
    } catch (e) {
      fill(listEl, unavailable(e, "Listing recurring schedules"));
      return;
    }
    next = res.schedules.length ? res.nextPageToken : "";
    (pager.querySelector("#sch-next") as HTMLButtonElement).disabled = !next;
    const now = Date.now();
    fill(listEl, res.schedules.length
      ? table(["Name", "Topic", "When", "Time zone", "State", "Next (in the schedule's zone)", "Fired", "Policies", "Armed", ""], res.schedules.map((s) => scheduleRow(s, now)), { id: "sch-table" })
      : h("p", { class: "empty" }, `No recurring schedules${topic ? ` of ${topic}` : ""}.`));
  }

  function scheduleRow(g: GetScheduleResponse, now: number): HTMLTableRowElement {
    const s = g.schedule!;
    const toggle = h("button", {
      type: "button", class: s.paused ? "small resume" : "small pause", "data-verb": "schedule",
      onclick: () => setPaused(s.name, !s.paused, toggle),
    }, s.paused ? "Resume" : "Pause");
    const del = h("button", { type: "button", class: "small danger delete", "data-verb": "schedule", onclick: () => remove(s.name, del) }, "Delete");
    return row({ "data-name": s.name }, [
      h("strong", null, s.name), s.topic,
      h("code", null, s.spec), h("span", { class: "tz" }, s.timeZone || "UTC"),
      s.paused ? h("span", { class: "badge paused" }, "paused") : h("span", { class: "badge ok" }, "active"),
      g.next.length ? h("div", { class: "next" }, g.next.slice(0, 3).map((t) => h("div", null, zoned(timestampDate(t), s.timeZone || "UTC", now)))) : "—",
      num(g.fired), policies(s, g), g.armedId ? shortId(g.armedId) : "—",
      h("span", { class: "actions" }, toggle, del),
    ]);
  }

  /** policies shows a schedule's jitter, overlap policy and calendar, and what its overlap policy skipped or holds. */
  function policies(s: RecurringSchedule, g: GetScheduleResponse): HTMLElement {
    const lines: string[] = [];
    if (s.jitterMs > 0n) lines.push(`jitter ≤ ${duration(Number(s.jitterMs))}`);
    if (s.overlapPolicy === OverlapPolicy.SKIP) lines.push("overlap: skip");
    if (s.overlapPolicy === OverlapPolicy.BUFFER_ONE) lines.push("overlap: buffer one");
    if (s.calendar) lines.push(`calendar ${s.calendar} (${s.calendarPolicy === CalendarPolicy.SHIFT ? "shift" : "skip"} outside)`);
    if (g.skipped > 0n) lines.push(`${num(g.skipped)} skipped`);
    if (g.buffered) lines.push(`holding ${time(timestampDate(g.buffered))}`);
    return h("div", { class: "policies" }, lines.length ? lines.map((l) => h("div", null, l)) : "—");
  }

  async function setPaused(name: string, paused: boolean, btn: HTMLButtonElement): Promise<void> {
    if (paused && !(await confirm(`Pause ${name}?`, "Its armed occurrence is cancelled, and none is delivered until it is resumed.", "Pause"))) return;
    await busy(btn, async () => {
      try {
        if (paused) await call("PauseSchedule", () => api.pauseSchedule({ name }));
        else await call("ResumeSchedule", () => api.resumeSchedule({ name }));
        notify("ok", `${name} ${paused ? "paused" : "resumed"}`);
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  }

  async function remove(name: string, btn: HTMLButtonElement): Promise<void> {
    if (!(await confirm(`Delete ${name}?`, "The schedule is removed; no further occurrence is delivered.", "Delete"))) return;
    await busy(btn, async () => {
      try {
        await call("DeleteSchedule", () => api.deleteSchedule({ name }));
        notify("ok", `${name} deleted`);
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  }

  return { el, refresh, every: 5000 };
}

/**
 * zoned shows a moment as the clocks of a time zone read it (the zone
 * the schedule's spec is in), how far it is from now, and in its title
 * the browser's local time.
 */
function zoned(d: Date, tz: string, now: number): HTMLElement {
  let text: string;
  try {
    text = new Intl.DateTimeFormat("sv-SE", {
      timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    }).format(d);
  } catch {
    text = `${time(d).slice(0, 19)} (local)`;
  }
  const diff = d.getTime() - now;
  const rel = Math.abs(diff) < 1000 ? "now" : diff > 0 ? `in ${duration(diff)}` : `${duration(diff)} ago`;
  return h("span", { class: "when", title: `${time(d)} local · ${d.toISOString()}` }, text, h("small", null, ` (${rel})`));
}
