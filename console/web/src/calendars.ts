// Calendars: working-time calendars (a zone, weekly hours, closed dates);
// list, create, edit and delete.

import { api, call, Weekday, type Calendar, type ListCalendarsResponse, type WorkingHours } from "./api.js";
import { busy, confirm, failed, field, fill, h, notify, row, table, unavailable } from "./dom.js";
import type { Page } from "./page.js";

const days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/** parseHours reads lines such as "mon-fri 09:00-12:00,13:00-17:00" into working hours; it throws saying what is wrong. */
export function parseHours(text: string): { day: Weekday; start: string; end: string }[] {
  const out: { day: Weekday; start: string; end: string }[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const m = /^(\S+)\s+(\S+)$/.exec(line);
    if (!m) throw new Error(`hours "${line}": want DAYS SPANS, such as mon-fri 09:00-17:00`);
    const wds: number[] = [];
    for (const part of m[1].split(",")) {
      const [a, b = a] = part.split("-");
      const from = days.indexOf(a.toLowerCase());
      const to = days.indexOf(b.toLowerCase());
      if (from < 0 || to < 0) throw new Error(`hours "${line}": day "${part}": want mon, tue, wed, thu, fri, sat or sun, or a range such as mon-fri`);
      for (let d = from; ; d = (d + 1) % 7) {
        wds.push(d);
        if (d === to) break;
      }
    }
    for (const span of m[2].split(",")) {
      const [start, end] = span.split("-");
      if (!start || !end) throw new Error(`hours "${line}": span "${span}": want HH:MM-HH:MM, such as 09:00-17:00`);
      for (const d of wds) out.push({ day: (d + 1) as Weekday, start, end });
    }
  }
  return out;
}

/** hoursText is a calendar's hours as lines of parseHours, days with the same spans joined. */
export function hoursText(hours: WorkingHours[]): string[] {
  const spans = days.map((_, i) => hours.filter((x) => x.day === i + 1).map((x) => `${x.start}-${x.end}`).join(","));
  const lines: string[] = [];
  for (let i = 0; i < 7; ) {
    let k = i + 1;
    while (k < 7 && spans[k] === spans[i]) k++;
    if (spans[i]) lines.push(`${days[i]}${k - i > 1 ? `-${days[k - 1]}` : ""} ${spans[i]}`);
    i = k;
  }
  return lines;
}

export function calendarsPage(): Page {
  const formEl = h("form", { id: "cal-form", class: "grid-form" },
    h("label", null, h("span", null, "Name"), field({ name: "name", required: true, placeholder: "berlin" })),
    h("label", null, h("span", null, "Time zone"), field({ name: "tz", placeholder: "UTC, Europe/Berlin" })),
    h("label", { class: "wide" }, h("span", null, "Working hours, one line per days"),
      field({ name: "hours", type: "textarea", placeholder: "mon-fri 09:00-12:00,13:00-17:00\nsat 10:00-14:00" })),
    h("label", { class: "wide" }, h("span", null, "Closed dates (YYYY-MM-DD, one a line or joined by commas)"),
      field({ name: "closed", type: "textarea", placeholder: "2030-12-25\n2030-12-26" })),
    h("div", null,
      h("button", { type: "submit", id: "cal-save" }, "Create calendar"),
      h("button", { type: "button", id: "cal-cancel", class: "small", hidden: true, onclick: () => reset() }, "Cancel edit")));
  const input = (n: string) => formEl.elements.namedItem(n) as HTMLInputElement;
  let editing = "";
  const heading = h("h2", null, "New calendar");

  function reset(): void {
    editing = "";
    formEl.reset();
    input("name").readOnly = false;
    heading.textContent = "New calendar";
    (formEl.querySelector("#cal-save") as HTMLButtonElement).textContent = "Create calendar";
    (formEl.querySelector("#cal-cancel") as HTMLButtonElement).hidden = true;
  }

  function edit(c: Calendar): void {
    editing = c.name;
    input("name").value = c.name;
    input("name").readOnly = true;
    input("tz").value = c.timeZone;
    input("hours").value = hoursText(c.hours).join("\n");
    input("closed").value = c.closedDates.join("\n");
    heading.textContent = `Edit ${c.name}`;
    (formEl.querySelector("#cal-save") as HTMLButtonElement).textContent = "Save calendar";
    (formEl.querySelector("#cal-cancel") as HTMLButtonElement).hidden = false;
    formEl.scrollIntoView();
  }

  formEl.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = input("name").value.trim();
    let hours;
    try {
      hours = parseHours(input("hours").value);
    } catch (e) {
      failed(e);
      return;
    }
    const calendar = {
      name, timeZone: input("tz").value.trim(), hours,
      closedDates: input("closed").value.split(/[\s,]+/).filter((d) => d !== ""),
    };
    await busy(formEl.querySelector("button[type=submit]"), async () => {
      try {
        if (editing) await call("UpdateCalendar", () => api.updateCalendar({ calendar }));
        else await call("CreateCalendar", () => api.createCalendar({ calendar }));
        notify("ok", `${editing ? "Saved" : "Created"} ${name}`);
        reset();
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  });

  const listEl = h("div", { id: "cal-list" }, "Loading…");
  const el = h("div", { class: "page calendars" },
    h("section", { class: "card wide" }, heading, formEl,
      h("p", { class: "hint" }, "A message sent in a calendar's working time keeps the time computed when it was stored: changing the calendar later does not move it. Recurring schedules follow the calendar from their next occurrence on.")),
    h("section", { class: "card wide" }, h("h2", null, "Calendars"), listEl));

  async function refresh(): Promise<void> {
    const all: Calendar[] = [];
    try {
      let token = "";
      do {
        const res: ListCalendarsResponse = await call("ListCalendars", () => api.listCalendars({ pageToken: token, pageSize: 1000 }));
        all.push(...res.calendars);
        token = res.nextPageToken;
      } while (token);
    } catch (e) {
      fill(listEl, unavailable(e, "Listing calendars"));
      return;
    }
    const today = new Date().toISOString().slice(0, 10);
    fill(listEl, all.length
      ? table(["Name", "Zone", "Working hours", "Closed dates", "Next closed", ""], all.map((c) => {
        const ed = h("button", { type: "button", class: "small edit", onclick: () => edit(c) }, "Edit");
        const del = h("button", { type: "button", class: "small danger delete", onclick: () => remove(c.name, del) }, "Delete");
        return row({ "data-name": c.name }, [
          h("strong", null, c.name), c.timeZone || "UTC",
          h("div", { class: "hours" }, hoursText(c.hours).map((l) => h("div", null, l))),
          String(c.closedDates.length), c.closedDates.find((d) => d >= today) ?? "—",
          h("span", { class: "actions" }, ed, del),
        ]);
      }), { id: "cal-table" })
      : h("p", { class: "empty" }, "No calendars."));
  }

  async function remove(name: string, btn: HTMLButtonElement): Promise<void> {
    if (!(await confirm(`Delete ${name}?`, "Messages sent in its working time keep their times. A calendar a recurring schedule keeps to is not deleted.", "Delete"))) return;
    await busy(btn, async () => {
      try {
        await call("DeleteCalendar", () => api.deleteCalendar({ name }));
        notify("ok", `${name} deleted`);
        if (editing === name) reset();
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  }

  return { el, refresh, every: 5000 };
}
