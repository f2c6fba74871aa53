// Recurring schedules: a message delivered to a topic at every occurrence of a cron spec or an
// interval, in a time zone, in the shapes the client's calls take and answer.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  MisfirePolicy as PbMisfirePolicy,
  type GetScheduleResponse,
  type RecurringScheduleSchema,
} from "./gen/hourglass/v1/hourglass_pb.js";
import { policyFieldsInit, policyFieldsOf, type CalendarPolicy, type OverlapPolicy } from "./calendars.js";

/**
 * What a schedule does with the occurrences that fell while the server was down: "fire-latest"
 * (the default) delivers them once, late, as one; "fire-all" delivers each, oldest first (up to
 * 100 in a row); "skip" delivers none. The next future occurrence follows in each case.
 */
export type MisfirePolicy = "fire-latest" | "fire-all" | "skip";

/**
 * A recurring schedule to create or update. Each occurrence is an ordinary message of topic with
 * the idempotency key "<name>@<time>" (UTC, "2030-01-02T09:00:00.000Z"), so cancel, get and
 * reschedule take { topic, key } for it, and the headers "hourglass-schedule" (the name) and
 * "hourglass-occurrence" (its time) beside its own.
 */
export interface RecurringScheduleInput {
  /** 1 to 160 ASCII letters, digits, '.', '_' and '-'. */
  name: string;
  topic: string;
  /**
   * A 5-field cron spec, minute first ("0 9 * * MON-FRI"); a 6-field one, seconds first
   * ("*\/30 * * * * *"); "@every 90s" (whole seconds, at least 1 s); or @yearly, @monthly,
   * @weekly, @daily, @hourly.
   */
  spec: string;
  /**
   * The IANA zone the spec is read in ("Europe/Berlin"); UTC by default. A local time the clocks
   * skip fires once at the first instant after the gap; one they repeat fires once.
   */
  timeZone?: string;
  body?: Uint8Array | string;
  headers?: Record<string, string>;
  /** No occurrence before start or after end. */
  start?: Date;
  end?: Date;
  misfire?: MisfirePolicy;
  /** createSchedule: create it paused. updateSchedule keeps the schedule's paused state. */
  paused?: boolean;
  /**
   * Delays each occurrence's delivery by 0 to jitterMs (whole milliseconds, at most 7 days), never
   * before its time: the same delay for the same occurrence, derived from name and its time.
   */
  jitterMs?: number;
  /** While the previous occurrence is not acked; "allow" by default. */
  overlap?: OverlapPolicy;
  /** A calendar (createCalendar) whose working time the occurrences keep to, as calendarPolicy says. */
  calendar?: string;
  /** With calendar: "skip" (the default) or "shift". */
  calendarPolicy?: CalendarPolicy;
}

/** A recurring schedule as the server holds it. */
export interface RecurringSchedule {
  name: string;
  topic: string;
  spec: string;
  /** Empty: UTC. */
  timeZone: string;
  body: Uint8Array;
  headers: Record<string, string>;
  start?: Date;
  end?: Date;
  misfire: MisfirePolicy;
  paused: boolean;
  /** 0: no jitter. */
  jitterMs: number;
  overlap: OverlapPolicy;
  /** Empty: none. */
  calendar: string;
  /** Set when calendar is. */
  calendarPolicy?: CalendarPolicy;
}

/** What getSchedule and listSchedules answer. */
export interface ScheduleInfo {
  schedule: RecurringSchedule;
  /** Its next fire times from now, oldest first; none while paused or past its end. */
  next: Date[];
  /** The id of its armed occurrence (the pending message of the next one), if one is pending. */
  armedId?: string;
  /** Occurrences delivered since it was created. */
  fired: number;
  /** Occurrences its overlap policy did not deliver. */
  skipped: number;
  /** The time of the occurrence "buffer-one" holds until the previous one is acked, if one is held. */
  buffered?: Date;
}

/** What listSchedules lists. */
export interface ListSchedulesOptions {
  /** Only the schedules of this topic. */
  topic?: string;
  /** Schedules fetched per call, 1 to 1000; default 100. */
  pageSize?: number;
}

/** One page of listSchedulesPage; nextPageToken is empty on the last. */
export interface SchedulePage {
  schedules: ScheduleInfo[];
  nextPageToken: string;
}

const misfireToPb: Record<MisfirePolicy, PbMisfirePolicy> = {
  "fire-latest": PbMisfirePolicy.FIRE_LATEST,
  "fire-all": PbMisfirePolicy.FIRE_ALL,
  skip: PbMisfirePolicy.SKIP,
};

const encoder = new TextEncoder();

/** scheduleInit checks s and builds the API's RecurringSchedule. */
export function scheduleInit(s: RecurringScheduleInput): MessageInitShape<typeof RecurringScheduleSchema> {
  let misfirePolicy = PbMisfirePolicy.UNSPECIFIED;
  if (s.misfire !== undefined) {
    misfirePolicy = misfireToPb[s.misfire];
    if (misfirePolicy === undefined) {
      throw new TypeError(`hourglass: schedule ${s.name}: misfire ${String(s.misfire)}: want fire-latest (the default), fire-all or skip`);
    }
  }
  return {
    name: s.name,
    topic: s.topic,
    spec: s.spec,
    timeZone: s.timeZone ?? "",
    body: typeof s.body === "string" ? encoder.encode(s.body) : (s.body ?? new Uint8Array()),
    headers: Object.entries(s.headers ?? {}).map(([key, value]) => ({ key, value })),
    start: s.start ? timestampFromDate(s.start) : undefined,
    end: s.end ? timestampFromDate(s.end) : undefined,
    misfirePolicy,
    paused: s.paused ?? false,
    ...policyFieldsInit(s.name, s),
  };
}

/** scheduleInfoOf turns the API's answer into a ScheduleInfo. */
export function scheduleInfoOf(g: GetScheduleResponse): ScheduleInfo {
  const s = g.schedule;
  const headers: Record<string, string> = {};
  for (const { key, value } of s?.headers ?? []) headers[key] = value;
  let misfire: MisfirePolicy = "fire-latest";
  if (s?.misfirePolicy === PbMisfirePolicy.FIRE_ALL) misfire = "fire-all";
  if (s?.misfirePolicy === PbMisfirePolicy.SKIP) misfire = "skip";
  const info: ScheduleInfo = {
    schedule: {
      name: s?.name ?? "",
      topic: s?.topic ?? "",
      spec: s?.spec ?? "",
      timeZone: s?.timeZone ?? "",
      body: s?.body ?? new Uint8Array(),
      headers,
      misfire,
      paused: s?.paused ?? false,
      ...policyFieldsOf(s),
    },
    next: g.next.map(timestampDate),
    fired: Number(g.fired),
    skipped: Number(g.skipped),
  };
  if (g.buffered) info.buffered = timestampDate(g.buffered);
  if (s?.start) info.schedule.start = timestampDate(s.start);
  if (s?.end) info.schedule.end = timestampDate(s.end);
  if (g.armedId) info.armedId = g.armedId;
  return info;
}
