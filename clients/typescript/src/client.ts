// The client of one Hourglass server: calls of the API in the shapes a
// TypeScript program uses (Dates, milliseconds as numbers, strings), over
// any Connect transport (see ./node.ts and ./web.ts).

import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { context, propagation, type TextMapSetter } from "@opentelemetry/api";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  CancelResult as PbCancelResult,
  HourglassService,
  MessageState,
  RescheduleResult as PbRescheduleResult,
  type Message as PbMessage,
  type ScheduleRequest,
} from "./gen/hourglass/v1/hourglass_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ScheduleRequestSchema } from "./gen/hourglass/v1/hourglass_pb.js";
import { consume, type ConsumeOptions, type Handler } from "./consume.js";
import {
  defaultsOf,
  policyInit,
  policyOf,
  purgeStateOf,
  topicInfoOf,
  type DeletedTopic,
  type FrozenPause,
  type Policies,
  type Policy,
  type PolicyField,
  type PurgeState,
  type RedriveOptions,
  type RedriveResult,
  type TopicInfo,
} from "./operate.js";
import {
  scheduleInfoOf,
  scheduleInit,
  type ListSchedulesOptions,
  type RecurringScheduleInput,
  type ScheduleInfo,
  type SchedulePage,
} from "./schedules.js";
import { calendarInit, calendarOf, workingInit, type Backfilled, type Calendar, type CalendarPage, type WorkingTime } from "./calendars.js";
import { editInit, editResultOf, type EditInput, type EditResult } from "./edit.js";
import { freezeResultOf, thawResultOf, type FreezeMessageResult, type ThawMessageResult } from "./freeze.js";

/** A message to schedule. At most one of delayMs, at, level and working; none means now. */
export interface ScheduleInput {
  /** The topic to deliver to (letters, digits, '.', '_', '-'; up to 200 bytes). */
  topic: string;
  /** The body: bytes, or a string sent as UTF-8. */
  body?: Uint8Array | string;
  /** Delivered with the message; names beginning with "hourglass-" (any case) are the server's own and refused. */
  headers?: Record<string, string>;
  /** Milliseconds from the server's clock when the request arrives (rounded up, never early). */
  delayMs?: number;
  /** An absolute delivery time; a time in the past is due at once. */
  at?: Date;
  /** A delay level of the server's --delay-levels, 1-based (level 3 is 10 s by default). */
  level?: number;
  /** A time in a calendar's working time, computed by the server when it stores the message. */
  working?: WorkingTime;
  /**
   * An idempotency key: a second schedule of the same topic and key within the server's
   * --idempotency-window answers the first message's id and stores nothing. The message can be
   * cancelled, looked up and rescheduled by { topic, key } for its whole life.
   */
  key?: string;
  /**
   * A flow key (a tenant, an account): the topic's flow policy bounds and orders messages per
   * key (flowConcurrency, flowRate, flowOrdered, flowFair). Not the idempotency key: many
   * messages share one. Delivered as the header "hourglass-flow-key".
   */
  flowKey?: string;
  /** When the message expires: never handed to a consumer from then on (dead-lettered, reason "expired"); after its delivery time. */
  expireAt?: Date;
  /** Or: milliseconds after its delivery time that it expires (1 or more). At most one of expireAt and ttlMs. */
  ttlMs?: number;
}

/** What the server stored: the message's id and when it will be delivered. */
export interface Scheduled {
  id: string;
  deliverAt: Date;
}

/** Names one message: its id, or its topic and the key it was scheduled with. */
export type Ref = string | { topic: string; key: string };

/** What cancel did. */
export type CancelResult = "cancelled" | "already-cancelled" | "already-delivered" | "unknown";

/** A new delivery time: milliseconds from the server's clock, an absolute time, or now. */
export type When = { delayMs: number } | { at: Date } | { now: true };

/** What reschedule did: moved under a new id, or why nothing changed. */
export type RescheduleResult =
  | { result: "rescheduled"; id: string; deliverAt: Date }
  | { result: "already-delivered" | "already-cancelled" | "unknown" };

/** What became of a message, as get tells it. */
export type State =
  | "pending"
  | "delivering"
  | "delivered"
  | "due"
  | "leased"
  | "acked"
  | "cancelled"
  | "dead-lettered"
  | "rescheduled"
  | "not-found";

/** What get answers. */
export interface Found {
  state: State;
  /** The message as scheduled; undefined when not found. */
  message?: StoredMessage;
  /** Leased: when the lease ends. */
  leaseExpiresAt?: Date;
  /** Dead-lettered by the queue: the topic that holds it. */
  deadLetterTopic?: string;
  /**
   * The id that carries the message now, when it is not the one asked for:
   * after a reschedule, a retry (a nack with a delay, or the topic's backoff)
   * or a redrive; state and message are that one's. (Cluster mode: the
   * replacement of a "rescheduled" message.)
   */
  rescheduledTo?: string;
}

/** A message as the server stores it. */
export interface StoredMessage {
  id: string;
  topic: string;
  headers: Record<string, string>;
  body: Uint8Array;
  deliverAt?: Date;
  attempt: number;
  /** The first attempt's id of a retry or reschedule; the id itself otherwise. */
  originId: string;
  /**
   * get and list: when it is due with its topic's frozen pauses counted, if they make it due
   * after deliverAt; frozen while such a pause lasts (dueAt then as if resumed now).
   */
  dueAt?: Date;
  frozen?: boolean;
  /**
   * get and list of a message frozen on its own (freezeMessage): the delay it keeps until
   * thawMessage; frozen is then set and dueAt is as if it were thawed now.
   */
  frozenRemainingMs?: number;
  /** Set on a dead letter (a message of "<topic>.dlq", or one get finds dead-lettered): why it died. */
  deadLetter?: {
    originTopic: string;
    /** "max-attempts", "nacked" or "sink". */
    reason: string;
    lastError: string;
    attempts: number;
    at?: Date;
  };
}

/** A due message handed to a consumer under a lease. */
export interface Delivery extends StoredMessage {
  deliverAt: Date;
  receivedAt: Date;
  leaseExpiresAt: Date;
  /**
   * Names this lease: acks and nacks act only while it holds. Empty on a message a consume on a
   * Consume stream got from a single node (the stream settles it by its number there): ack and
   * nack then name it by id.
   */
  receipt: string;
}

/** Options of every client. */
export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>", for a server started with --auth-token. */
  token?: string;
  /** More Connect interceptors (tracing, logging). */
  interceptors?: Interceptor[];
}

/** The interceptors options ask for. */
export function interceptorsOf(options: ClientOptions = {}): Interceptor[] {
  // The W3C trace context of the active span (with an OpenTelemetry SDK registered): the server
  // stores a Schedule's with its messages, and consume starts each handler's span under it.
  const out: Interceptor[] = [
    (next) => (req) => {
      propagation.inject(context.active(), req.header, headerSetter);
      return next(req);
    },
  ];
  const token = options.token;
  if (token) {
    out.push((next) => (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  return out.concat(options.interceptors ?? []);
}

const headerSetter: TextMapSetter<Headers> = { set: (h, k, v) => h.set(k, v) };

const encoder = new TextEncoder();

function scheduleRequest(m: ScheduleInput): MessageInitShape<typeof ScheduleRequestSchema> {
  const set = [m.delayMs !== undefined, m.at !== undefined, m.level !== undefined, m.working !== undefined].filter(Boolean).length;
  if (set > 1) {
    throw new TypeError(`hourglass: delayMs, at, level and working of one message: give at most one of them`);
  }
  let when: MessageInitShape<typeof ScheduleRequestSchema>["when"] = { case: undefined };
  if (m.delayMs !== undefined) {
    if (!(m.delayMs >= 0) || !Number.isFinite(m.delayMs)) {
      throw new TypeError(`hourglass: delayMs ${m.delayMs}: want a finite number of 0 or more`);
    }
    when = { case: "delayMs", value: BigInt(Math.ceil(m.delayMs)) };
  } else if (m.at !== undefined) {
    when = { case: "deliverAt", value: timestampFromDate(m.at) };
  } else if (m.level !== undefined) {
    when = { case: "delayLevel", value: m.level };
  } else if (m.working !== undefined) {
    when = { case: "working", value: workingInit(m.working) };
  }
  let expiry: MessageInitShape<typeof ScheduleRequestSchema>["expiry"] = { case: undefined };
  if (m.expireAt !== undefined && m.ttlMs !== undefined) {
    throw new TypeError(`hourglass: expireAt and ttlMs of one message: give at most one of them`);
  } else if (m.expireAt !== undefined) {
    expiry = { case: "expireAt", value: timestampFromDate(m.expireAt) };
  } else if (m.ttlMs !== undefined) {
    if (!(m.ttlMs >= 1) || !Number.isFinite(m.ttlMs)) {
      throw new TypeError(`hourglass: ttlMs ${m.ttlMs}: want a finite number of 1 or more (milliseconds after the delivery time)`);
    }
    expiry = { case: "ttlMs", value: BigInt(Math.ceil(m.ttlMs)) };
  }
  return {
    topic: m.topic,
    expiry,
    body: typeof m.body === "string" ? encoder.encode(m.body) : (m.body ?? new Uint8Array()),
    headers: Object.entries(m.headers ?? {}).map(([key, value]) => ({ key, value })),
    when,
    idempotencyKey: m.key ?? "",
    flowKey: m.flowKey ?? "",
  };
}

function refOf(ref: Ref): { id: string; topic: string; key: string } {
  return typeof ref === "string" ? { id: ref, topic: "", key: "" } : { id: "", topic: ref.topic, key: ref.key };
}

function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

function headersOf(m: PbMessage): Record<string, string> {
  const h: Record<string, string> = {};
  for (const { key, value } of m.headers) h[key] = value;
  return h;
}

function storedOf(m: PbMessage): StoredMessage {
  const s: StoredMessage = {
    id: m.id,
    topic: m.topic,
    headers: headersOf(m),
    body: m.body,
    deliverAt: dateOf(m.deliverAt),
    attempt: m.attempt,
    originId: m.originId || m.id,
  };
  if (m.dueAt) {
    s.dueAt = dateOf(m.dueAt);
    s.frozen = m.frozen;
  }
  if (m.frozenRemainingMs !== undefined) s.frozenRemainingMs = Number(m.frozenRemainingMs);
  if (m.deadLetter) {
    const dl = m.deadLetter;
    s.deadLetter = {
      originTopic: dl.originTopic,
      reason: dl.reason,
      lastError: dl.lastError,
      attempts: dl.attempts,
      at: dateOf(dl.at),
    };
  }
  return s;
}

/** deliveryOf turns a received message into a Delivery. */
export function deliveryOf(m: PbMessage): Delivery {
  const epoch = new Date(0);
  const d: Delivery = {
    ...storedOf(m),
    deliverAt: dateOf(m.deliverAt) ?? epoch,
    receivedAt: dateOf(m.receivedAt) ?? epoch,
    leaseExpiresAt: dateOf(m.leaseExpiresAt) ?? epoch,
    receipt: m.receipt,
  };
  return d;
}

const cancelResults: Record<PbCancelResult, CancelResult | undefined> = {
  [PbCancelResult.UNSPECIFIED]: undefined,
  [PbCancelResult.CANCELLED]: "cancelled",
  [PbCancelResult.ALREADY_CANCELLED]: "already-cancelled",
  [PbCancelResult.ALREADY_DELIVERED]: "already-delivered",
  [PbCancelResult.UNKNOWN]: "unknown",
};

const states: Record<MessageState, State> = {
  [MessageState.UNSPECIFIED]: "not-found",
  [MessageState.PENDING]: "pending",
  [MessageState.DELIVERING]: "delivering",
  [MessageState.DELIVERED]: "delivered",
  [MessageState.DUE]: "due",
  [MessageState.LEASED]: "leased",
  [MessageState.ACKED]: "acked",
  [MessageState.CANCELLED]: "cancelled",
  [MessageState.DEAD_LETTERED]: "dead-lettered",
  [MessageState.NOT_FOUND]: "not-found",
  [MessageState.RESCHEDULED]: "rescheduled",
};

/**
 * HourglassClient calls one Hourglass server. Errors the server answers are ConnectErrors
 * whose code says what to do: InvalidArgument (fix the request; the message says what is
 * allowed), Unauthenticated, Unavailable or ResourceExhausted (retry later).
 */
export class HourglassClient {
  /** The generated client of the whole API, for the calls this class does not wrap. */
  readonly rpc: Client<typeof HourglassService>;

  constructor(
    transport: Transport,
    private readonly onClose: () => void = () => {},
    /** Whether transport carries bidirectional streams (HTTP/2 in Node): consume then runs on a Consume stream. */
    readonly streams = false,
  ) {
    this.rpc = createClient(HourglassService, transport);
  }

  /** Stores one message and answers its id once it is durable under the server's fsync policy. */
  async schedule(m: ScheduleInput): Promise<Scheduled> {
    const res = await this.rpc.schedule(scheduleRequest(m));
    return { id: res.id, deliverAt: dateOf(res.deliverAt) ?? new Date(0) };
  }

  /** Stores up to 1000 messages atomically (all or none) and answers their ids in order. */
  async scheduleBatch(ms: ScheduleInput[]): Promise<Scheduled[]> {
    const res = await this.rpc.scheduleBatch({ messages: ms.map(scheduleRequest) });
    if (res.results.length !== ms.length) {
      throw new Error(`hourglass: scheduleBatch: ${res.results.length} results for ${ms.length} messages`);
    }
    return res.results.map((r) => ({ id: r.id, deliverAt: dateOf(r.deliverAt) ?? new Date(0) }));
  }

  /** Makes sure the message is never delivered, if it is not too late; the answer says which. */
  async cancel(ref: Ref): Promise<CancelResult> {
    const res = await this.rpc.cancel(refOf(ref));
    const r = cancelResults[res.result];
    if (!r) throw new Error(`hourglass: cancel: the server answered result ${res.result}, which this client does not know`);
    return r;
  }

  /**
   * Moves a pending message to a new time, atomically: the old time never fires, and the
   * message is delivered at the new time under a new id (its originId stays).
   */
  async reschedule(ref: Ref, when: When): Promise<RescheduleResult> {
    let w: { case: "delayMs"; value: bigint } | { case: "deliverAt"; value: Timestamp } | { case: "now"; value: boolean };
    if ("now" in when) {
      w = { case: "now", value: true };
    } else if ("at" in when) {
      w = { case: "deliverAt", value: timestampFromDate(when.at) };
    } else {
      if (!(when.delayMs >= 0) || !Number.isFinite(when.delayMs)) {
        throw new TypeError(`hourglass: reschedule: delayMs ${when.delayMs}: want a finite number of 0 or more`);
      }
      w = { case: "delayMs", value: BigInt(Math.ceil(when.delayMs)) };
    }
    const res = await this.rpc.reschedule({ ...refOf(ref), when: w });
    switch (res.result) {
      case PbRescheduleResult.RESCHEDULED:
        return { result: "rescheduled", id: res.id, deliverAt: dateOf(res.deliverAt) ?? new Date(0) };
      case PbRescheduleResult.ALREADY_DELIVERED:
        return { result: "already-delivered" };
      case PbRescheduleResult.ALREADY_CANCELLED:
        return { result: "already-cancelled" };
      case PbRescheduleResult.UNKNOWN:
        return { result: "unknown" };
    }
    throw new Error(`hourglass: reschedule: the server answered result ${res.result}, which this client does not know`);
  }

  /**
   * Replaces the body and/or headers of a pending message, atomically, keeping its delivery time:
   * "edited" only if its next delivery carries the new content; once it is being delivered,
   * "already-delivered". The first id and the key go on naming it.
   */
  async edit(ref: Ref, change: EditInput): Promise<EditResult> {
    return editResultOf(await this.rpc.edit({ ...refOf(ref), ...editInit(change) }));
  }

  /**
   * Stops the clock of a pending message, atomically: "frozen" only if its old time will never
   * fire; it is never delivered until thawMessage, which makes it due the delay it had left
   * (remainingMs) from the thaw. The first id and the key go on naming it; cancel cancels it.
   */
  async freezeMessage(ref: Ref): Promise<FreezeMessageResult> {
    return freezeResultOf(await this.rpc.freezeMessage(refOf(ref)));
  }

  /** Starts the clock of a frozen message again: it is due the delay it had left from now. */
  async thawMessage(ref: Ref): Promise<ThawMessageResult> {
    return thawResultOf(await this.rpc.thawMessage(refOf(ref)));
  }

  /** Looks a message up and says what became of it. It only reads. */
  async get(ref: Ref): Promise<Found> {
    const res = await this.rpc.get(refOf(ref));
    const f: Found = { state: states[res.state] ?? "not-found" };
    if (res.message) f.message = storedOf(res.message);
    if (res.leaseExpiresAt) f.leaseExpiresAt = timestampDate(res.leaseExpiresAt);
    if (res.deadLetterTopic) f.deadLetterTopic = res.deadLetterTopic;
    if (res.rescheduledTo) f.rescheduledTo = res.rescheduledTo;
    return f;
  }

  /** Long-polls a topic once: answers as soon as a message is due, or none after waitMs. */
  async receive(topic: string, o: { maxMessages?: number; waitMs?: number; leaseMs?: number; signal?: AbortSignal } = {}): Promise<Delivery[]> {
    const res = await this.rpc.receive(
      { topic, maxMessages: o.maxMessages ?? 1, waitMs: BigInt(o.waitMs ?? 0), leaseMs: BigInt(o.leaseMs ?? 0) },
      { signal: o.signal },
    );
    return res.messages.map(deliveryOf);
  }

  /** Completes a received message: it is never delivered again. */
  async ack(d: Delivery): Promise<void> {
    await this.rpc.ack(d.receipt ? { topic: d.topic, receipt: d.receipt } : { topic: d.topic, id: d.id });
  }

  /**
   * Gives a received message back: delivered again after delayMs (0: the topic's retry backoff
   * on the server), or dead-lettered at once; reason is kept with it.
   */
  async nack(d: Delivery, o: { delayMs?: number; reason?: string; deadLetter?: boolean; release?: boolean } = {}): Promise<void> {
    await this.rpc.nack({
      topic: d.topic,
      ...(d.receipt ? { receipt: d.receipt } : { id: d.id }),
      release: o.release ?? false,
      delayMs: BigInt(Math.ceil(o.delayMs ?? 0)),
      reason: o.reason ?? "",
      deadLetter: o.deadLetter ?? false,
    });
  }

  /**
   * Consumes a topic until options.signal aborts, calling handler with each due message,
   * up to options.concurrency at once. See ConsumeOptions and Handler.
   */
  consume(topic: string, handler: Handler, options: ConsumeOptions = {}): Promise<void> {
    return consume(this, topic, handler, options);
  }

  /**
   * Moves the dead letters of deadLetterTopic ("<topic>.dlq") back as new first attempts that keep
   * their originId, and removes them from it. A redrive cut short may be called again: a message
   * moved before is not moved twice.
   */
  async redrive(deadLetterTopic: string, o: RedriveOptions = {}): Promise<RedriveResult> {
    const res = await this.rpc.redrive({
      deadLetterTopic,
      toTopic: o.to ?? "",
      reason: o.reason ?? "",
      ids: o.ids ?? [],
      ratePerSecond: o.ratePerSecond ?? 0,
      maxMessages: o.max ?? 0,
    });
    return { redriven: Number(res.redriven), skipped: Number(res.skipped), more: res.more };
  }

  /**
   * Removes topic's messages in one state and answers how many: pending ones are cancelled, due
   * ones and dead-lettered ones (those of "<topic>.dlq") are removed. Leased ones stay.
   */
  async purge(topic: string, state: PurgeState): Promise<number> {
    const res = await this.rpc.purge({ topic, state: purgeStateOf(state) });
    return Number(res.purged);
  }

  /** Cancels topic's pending messages, removes its queued ones, its files and its policy. */
  async deleteTopic(topic: string): Promise<DeletedTopic> {
    const res = await this.rpc.deleteTopic({ topic });
    return { cancelled: Number(res.cancelled), removed: Number(res.removed) };
  }

  /** The topics the server knows, by name, with their counts and the policy each set. */
  async topics(): Promise<TopicInfo[]> {
    const res = await this.rpc.topics({});
    return res.topics.map(topicInfoOf);
  }

  /** A topic's delivery policy: what it set, and what applies. */
  async getPolicy(topic: string): Promise<Policies> {
    const res = await this.rpc.getPolicy({ topic });
    return { policy: policyOf(res.policy), effective: policyOf(res.effective), freezes: freezesOf(res.freezes) };
  }

  /**
   * Changes topic's policy at run time, durably: the fields policy sets take their values, the
   * fields in defaults go back to the server's defaults, the others keep theirs.
   */
  async setPolicy(topic: string, policy: Policy, defaults: PolicyField[] = []): Promise<Policies> {
    const res = await this.rpc.setPolicy({ topic, policy: policyInit(policy), defaults: defaultsOf(defaults) });
    return { policy: policyOf(res.policy), effective: policyOf(res.effective), freezes: freezesOf(res.freezes) };
  }

  /** Stops topic from handing out messages, durably, until resume. */
  pause(topic: string): Promise<Policies> {
    return this.setPolicy(topic, { paused: true });
  }

  /**
   * Pauses topic with its clock stopped: on resume every message stored before and not yet due
   * then is due as much later as the pause lasted. Costs the same whatever the topic holds.
   */
  freeze(topic: string): Promise<Policies> {
    return this.setPolicy(topic, { freeze: true });
  }

  /** Lets a paused topic hand out its messages again (ending a frozen pause). */
  resume(topic: string): Promise<Policies> {
    return this.setPolicy(topic, {}, ["paused"]);
  }

  /**
   * Creates a recurring schedule and arms its first occurrence; answers its time, or undefined
   * when none is armed (paused, or none before its end). A name taken fails with
   * Code.AlreadyExists; a bad spec, zone or name with Code.InvalidArgument.
   */
  async createSchedule(s: RecurringScheduleInput): Promise<Date | undefined> {
    const res = await this.rpc.createSchedule({ schedule: scheduleInit(s) });
    return dateOf(res.next);
  }

  /**
   * Replaces the definition of the schedule s.name names (its paused state and fired count stay)
   * and arms its next occurrence; answers its time. An unknown name fails with Code.NotFound.
   */
  async updateSchedule(s: RecurringScheduleInput): Promise<Date | undefined> {
    const res = await this.rpc.updateSchedule({ schedule: scheduleInit(s) });
    return dateOf(res.next);
  }

  /** Stops a schedule's occurrences, durably: once it answers none is delivered until resumed. */
  async pauseSchedule(name: string): Promise<void> {
    await this.rpc.pauseSchedule({ name });
  }

  /** Arms a paused schedule's next occurrence from now on, and answers its time. */
  async resumeSchedule(name: string): Promise<Date | undefined> {
    const res = await this.rpc.resumeSchedule({ name });
    return dateOf(res.next);
  }

  /** Deletes a schedule: once it answers, no further occurrence is delivered. */
  async deleteSchedule(name: string): Promise<void> {
    await this.rpc.deleteSchedule({ name });
  }

  /** A schedule with its next o.next fire times (default 5, at most 100). It only reads. */
  async getSchedule(name: string, o: { next?: number } = {}): Promise<ScheduleInfo> {
    return scheduleInfoOf(await this.rpc.getSchedule({ name, nextCount: o.next ?? 0 }));
  }

  /** One page of the schedules, by name, each with its next 3 fire times. */
  async listSchedulesPage(o: ListSchedulesOptions = {}, pageToken = ""): Promise<SchedulePage> {
    const res = await this.rpc.listSchedules({ topic: o.topic ?? "", pageSize: o.pageSize ?? 0, pageToken });
    return { schedules: res.schedules.map(scheduleInfoOf), nextPageToken: res.nextPageToken };
  }

  /** Every schedule (of o.topic, if given), by name, fetched a page at a time. */
  async *listSchedules(o: ListSchedulesOptions = {}): AsyncGenerator<ScheduleInfo> {
    let token = "";
    do {
      const page = await this.listSchedulesPage(o, token);
      yield* page.schedules;
      token = page.nextPageToken;
    } while (token);
  }

  /**
   * Delivers now the occurrences of the schedule name from from up to (not including) to, which
   * must not be after the server's clock (at most 10000): one message per occurrence, keyed as the
   * live one was, none for an occurrence whose message exists (so a backfill cut short is run
   * again safely). They carry the header "hourglass-backfill". An unknown name fails with
   * Code.NotFound.
   */
  async backfillSchedule(name: string, from: Date, to: Date): Promise<Backfilled> {
    const res = await this.rpc.backfillSchedule({ name, from: timestampFromDate(from), to: timestampFromDate(to) });
    return { stored: res.stored, existing: res.existing };
  }

  /**
   * Creates a calendar, durably. A name taken fails with Code.AlreadyExists; a bad zone, span or
   * date with Code.InvalidArgument naming it. Calendars are not available in cluster mode.
   */
  async createCalendar(c: Calendar): Promise<void> {
    await this.rpc.createCalendar({ calendar: calendarInit(c) });
  }

  /**
   * Replaces the calendar c.name names. Messages stored before keep their delivery times; recurring
   * schedules keep to the new one from their next occurrence on. Unknown: Code.NotFound.
   */
  async updateCalendar(c: Calendar): Promise<void> {
    await this.rpc.updateCalendar({ calendar: calendarInit(c) });
  }

  /** Deletes a calendar; one a recurring schedule keeps to fails with Code.FailedPrecondition. */
  async deleteCalendar(name: string): Promise<void> {
    await this.rpc.deleteCalendar({ name });
  }

  /** The calendar name; unknown: Code.NotFound. */
  async getCalendar(name: string): Promise<Calendar> {
    return calendarOf((await this.rpc.getCalendar({ name })).calendar);
  }

  /** One page of up to pageSize calendars (1 to 1000; default 100), by name. */
  async listCalendarsPage(o: { pageSize?: number } = {}, pageToken = ""): Promise<CalendarPage> {
    const res = await this.rpc.listCalendars({ pageSize: o.pageSize ?? 0, pageToken });
    return { calendars: res.calendars.map(calendarOf), nextPageToken: res.nextPageToken };
  }

  /** Every calendar, by name, fetched a page at a time. */
  async *listCalendars(o: { pageSize?: number } = {}): AsyncGenerator<Calendar> {
    let token = "";
    do {
      const page = await this.listCalendarsPage(o, token);
      yield* page.calendars;
      token = page.nextPageToken;
    } while (token);
  }

  /** Closes what the transport keeps open (an HTTP/2 session); calls in flight fail. */
  close(): void {
    this.onClose();
  }
}

function freezesOf(fs: { beganAt?: Timestamp; endedAt?: Timestamp }[]): FrozenPause[] {
  return fs.map((f) => {
    const out: FrozenPause = { beganAt: dateOf(f.beganAt) ?? new Date(0) };
    if (f.endedAt) out.endedAt = dateOf(f.endedAt);
    return out;
  });
}
