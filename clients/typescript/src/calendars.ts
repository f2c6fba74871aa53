// Working-time calendars, a message's delivery time in one, and the calendar, jitter and overlap
// fields of recurring schedules, in the shapes the client's calls take and answer.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  CalendarPolicy as PbCalendarPolicy,
  OverlapPolicy as PbOverlapPolicy,
  Weekday as PbWeekday,
  type Calendar as PbCalendar,
  type CalendarSchema,
  type WorkingTimeSchema,
} from "./gen/hourglass/v1/hourglass_pb.js";

/** A day of the week, as calendars name it. */
export type Weekday = "mon" | "tue" | "wed" | "thu" | "fri" | "sat" | "sun";

/** Working time on one weekday: from start up to (not including) end, "HH:MM" ("24:00": the day's end). */
export interface WorkingHours {
  day: Weekday;
  start: string;
  end: string;
}

/**
 * A calendar is working time: the working hours of each weekday, except on the closed dates, read
 * on the wall clock of timeZone. An instant is working time when its date there is not closed and
 * its time of day lies in one of that weekday's spans.
 */
export interface Calendar {
  /** 1 to 160 ASCII letters, digits, '.', '_' and '-'. */
  name: string;
  /** An IANA zone ("Europe/Berlin"); empty or undefined: UTC. */
  timeZone?: string;
  /** At least one span; the spans of a day may not overlap. */
  hours: WorkingHours[];
  /** Non-working dates, "YYYY-MM-DD" in the calendar's zone; answered sorted, without repeats. */
  closed?: string[];
}

/**
 * A delivery time in the working time of a calendar: the days-th working day after the start's
 * date at atTime ("HH:MM" on the calendar's clock; the start's time of day when not given), or
 * durationMs of working time after the start. The start is after, or the server's clock. The
 * server computes the time when it stores the message and answers it as deliverAt; a later change
 * of the calendar does not move the message.
 */
export interface WorkingTime {
  calendar: string;
  /** 1 to 3650; give days or durationMs. */
  days?: number;
  atTime?: string;
  /** 0 or more: 0 is the next working instant. */
  durationMs?: number;
  after?: Date;
}

/**
 * What a recurring schedule's occurrence does while the previous one is not yet acked: "allow"
 * (the default) delivers it; "skip" does not; "buffer-one" holds it until the previous one is
 * acked (later ones are skipped while one is held).
 */
export type OverlapPolicy = "allow" | "skip" | "buffer-one";

/**
 * What becomes of an occurrence outside its schedule's calendar's working time: "skip" (the
 * default) does not deliver it; "shift" delivers it at the next working instant.
 */
export type CalendarPolicy = "skip" | "shift";

/** What backfillSchedule stored. */
export interface Backfilled {
  /** Occurrences stored, each a message due at once. */
  stored: number;
  /** Occurrences whose message existed already (live, or an earlier backfill's), not stored again. */
  existing: number;
}

/** One page of listCalendarsPage; nextPageToken is empty on the last. */
export interface CalendarPage {
  calendars: Calendar[];
  nextPageToken: string;
}

const days: Weekday[] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const dayToPb: Record<Weekday, PbWeekday> = {
  mon: PbWeekday.MONDAY,
  tue: PbWeekday.TUESDAY,
  wed: PbWeekday.WEDNESDAY,
  thu: PbWeekday.THURSDAY,
  fri: PbWeekday.FRIDAY,
  sat: PbWeekday.SATURDAY,
  sun: PbWeekday.SUNDAY,
};

/** calendarInit checks c and builds the API's Calendar. */
export function calendarInit(c: Calendar): MessageInitShape<typeof CalendarSchema> {
  return {
    name: c.name,
    timeZone: c.timeZone ?? "",
    closedDates: c.closed ?? [],
    hours: c.hours.map((h) => {
      const day = dayToPb[h.day];
      if (day === undefined) {
        throw new TypeError(`hourglass: calendar ${c.name}: day ${String(h.day)}: want mon, tue, wed, thu, fri, sat or sun`);
      }
      return { day, start: h.start, end: h.end };
    }),
  };
}

/** calendarOf turns the API's Calendar into a Calendar. */
export function calendarOf(m: PbCalendar | undefined): Calendar {
  return {
    name: m?.name ?? "",
    timeZone: m?.timeZone ?? "",
    hours: (m?.hours ?? []).map((h) => ({ day: days[h.day - 1], start: h.start, end: h.end })),
    closed: [...(m?.closedDates ?? [])],
  };
}

/** workingInit checks w and builds the API's WorkingTime. */
export function workingInit(w: WorkingTime): MessageInitShape<typeof WorkingTimeSchema> {
  const hasDays = w.days !== undefined;
  if (hasDays === (w.durationMs !== undefined)) {
    throw new TypeError(`hourglass: working time in ${w.calendar}: give one of days and durationMs`);
  }
  let amount: MessageInitShape<typeof WorkingTimeSchema>["amount"];
  if (hasDays) {
    if (!Number.isInteger(w.days) || w.days! < 1 || w.days! > 3650) {
      throw new TypeError(`hourglass: working time in ${w.calendar}: days ${w.days}: want a whole number from 1 to 3650`);
    }
    amount = { case: "days", value: w.days! };
  } else {
    if (!(w.durationMs! >= 0) || !Number.isFinite(w.durationMs)) {
      throw new TypeError(`hourglass: working time in ${w.calendar}: durationMs ${w.durationMs}: want a finite number of 0 or more`);
    }
    if (w.atTime !== undefined) {
      throw new TypeError(`hourglass: working time in ${w.calendar}: atTime goes with days, not durationMs`);
    }
    amount = { case: "durationMs", value: BigInt(Math.ceil(w.durationMs!)) };
  }
  return { calendar: w.calendar, amount, atTime: w.atTime ?? "", after: w.after ? timestampFromDate(w.after) : undefined };
}

const overlapToPb: Record<OverlapPolicy, PbOverlapPolicy> = {
  allow: PbOverlapPolicy.ALLOW,
  skip: PbOverlapPolicy.SKIP,
  "buffer-one": PbOverlapPolicy.BUFFER_ONE,
};

/** The API's fields of a schedule's jitter, overlap and calendar. */
export interface PolicyFields {
  jitterMs: bigint;
  overlapPolicy: PbOverlapPolicy;
  calendar: string;
  calendarPolicy: PbCalendarPolicy;
}

/** policyInit checks a schedule's jitter, overlap and calendar and builds their API fields. */
export function policyFieldsInit(name: string, s: { jitterMs?: number; overlap?: OverlapPolicy; calendar?: string; calendarPolicy?: CalendarPolicy }): PolicyFields {
  const jitter = s.jitterMs ?? 0;
  if (!(jitter >= 0) || !Number.isFinite(jitter)) {
    throw new TypeError(`hourglass: schedule ${name}: jitterMs ${jitter}: want a finite number of 0 or more`);
  }
  let overlapPolicy = PbOverlapPolicy.UNSPECIFIED;
  if (s.overlap !== undefined) {
    overlapPolicy = overlapToPb[s.overlap];
    if (overlapPolicy === undefined) {
      throw new TypeError(`hourglass: schedule ${name}: overlap ${String(s.overlap)}: want allow (the default), skip or buffer-one`);
    }
  }
  let calendarPolicy = PbCalendarPolicy.UNSPECIFIED;
  if (s.calendarPolicy === "skip") calendarPolicy = PbCalendarPolicy.SKIP;
  else if (s.calendarPolicy === "shift") calendarPolicy = PbCalendarPolicy.SHIFT;
  else if (s.calendarPolicy !== undefined) {
    throw new TypeError(`hourglass: schedule ${name}: calendarPolicy ${String(s.calendarPolicy)}: want skip (the default) or shift`);
  }
  return { jitterMs: BigInt(Math.floor(jitter)), overlapPolicy, calendar: s.calendar ?? "", calendarPolicy };
}

/** policyFieldsOf reads a schedule's jitter, overlap and calendar from the API's fields. */
export function policyFieldsOf(s: Partial<PolicyFields> | undefined): {
  jitterMs: number;
  overlap: OverlapPolicy;
  calendar: string;
  calendarPolicy?: CalendarPolicy;
} {
  let overlap: OverlapPolicy = "allow";
  if (s?.overlapPolicy === PbOverlapPolicy.SKIP) overlap = "skip";
  if (s?.overlapPolicy === PbOverlapPolicy.BUFFER_ONE) overlap = "buffer-one";
  const out: ReturnType<typeof policyFieldsOf> = { jitterMs: Number(s?.jitterMs ?? 0n), overlap, calendar: s?.calendar ?? "" };
  if (out.calendar) out.calendarPolicy = s?.calendarPolicy === PbCalendarPolicy.SHIFT ? "shift" : "skip";
  return out;
}
