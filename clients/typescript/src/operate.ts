// Operating what a server holds: topics and their delivery policies, dead letters (redrive) and
// purges, in the shapes the client's calls take and answer (numbers, not bigints).

import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  MessageState,
  type Policy as PbPolicy,
  type PolicySchema,
  type TopicInfo as PbTopicInfo,
} from "./gen/hourglass/v1/hourglass_pb.js";

/**
 * How a topic's messages are delivered. Every field is optional: unset means the server's
 * default applies (in setPolicy: the field keeps its current value).
 */
export interface Policy {
  /** Deliveries before a message goes to "<topic>.dlq", 1 to 1000. */
  maxAttempts?: number;
  /** The delay before a retry after a nack without a delay, or an expired lease. */
  backoff?: Backoff;
  /** A paused topic hands out nothing: pending messages keep their times, due ones wait. */
  paused?: boolean;
  /** At most this many messages handed out per second (a burst of one second's worth); 0: no limit. */
  maxDispatchRate?: number;
  /** The lease of a receive that asks for none, in whole milliseconds, 1 ms to 12 h. */
  leaseMs?: number;
  /** Per flow key (a message's flowKey): at most this many of one key leased at once; 0: no bound. */
  flowConcurrency?: number;
  /** Per flow key: at most this many handed out per second, a token bucket of flowBurst; 0: no bound. */
  flowRate?: number;
  /** flowRate's bucket; 0: one second's worth. */
  flowBurst?: number;
  /** One message of a key at a time, in due order; the next once it is acked or dead-lettered. */
  flowOrdered?: boolean;
  /** The keys with due messages are served in turn, one message each. */
  flowFair?: boolean;
  /**
   * A frozen pause: paused with the topic's clock stopped; on resume every message stored before
   * it and not yet due then is due as much later as it lasted. Setting it pauses; resume ends it.
   */
  freeze?: boolean;
  /** A message past its expiry (ttlMs, expireAt) is dropped instead of dead-lettered with reason "expired". */
  expiryDrop?: boolean;
  /**
   * A message expires unless acked by its expiry, not only unless received by then: its lease
   * ending after the expiry ends it as expired, and an ack after it is refused (FailedPrecondition).
   */
  expiryUnacked?: boolean;
}

/** A frozen pause of a topic; endedAt is unset while it lasts. */
export interface FrozenPause {
  beganAt: Date;
  endedAt?: Date;
}

/** A retry delay: initialMs × multiplier^(retry−1), at most maxMs (0: no cap), less up to jitter of it. */
export interface Backoff {
  initialMs: number;
  maxMs?: number;
  /** 1 (a fixed delay, the default) to 10. */
  multiplier?: number;
  /** 0 (the default) to 1. */
  jitter?: number;
}

/** A topic's policy: what it set, and what applies (what it set over the server's defaults). */
export interface Policies {
  policy: Policy;
  effective: Policy;
  /** The topic's frozen pauses that may still make a message due later, oldest first. */
  freezes: FrozenPause[];
}

/** A field of Policy, for setPolicy to set back to the server's default. */
export type PolicyField =
  | "maxAttempts"
  | "backoff"
  | "paused"
  | "maxDispatchRate"
  | "leaseMs"
  | "flowConcurrency"
  | "flowRate"
  | "flowBurst"
  | "flowOrdered"
  | "flowFair"
  | "expiryDrop"
  | "expiryUnacked";

const policyFieldNames: Record<PolicyField, string> = {
  maxAttempts: "max_attempts",
  backoff: "backoff",
  paused: "paused",
  maxDispatchRate: "max_dispatch_rate",
  leaseMs: "lease_ms",
  flowConcurrency: "flow_concurrency",
  flowRate: "flow_rate",
  flowBurst: "flow_burst",
  flowOrdered: "flow_ordered",
  flowFair: "flow_fair",
  expiryDrop: "expiry_drop",
  expiryUnacked: "expiry_unacked",
};

/** One topic's counts and policy, as topics() tells them. */
export interface TopicInfo {
  topic: string;
  /** Due messages waiting to be received. */
  due: number;
  /** Received and not yet settled. */
  leased: number;
  /** Waiting in "<topic>.dlq". */
  deadLettered: number;
  /** How long the oldest due message has waited; 0 if none. */
  oldestDueAgeMs: number;
  /** What the topic set; unset fields take the server's defaults. */
  policy: Policy;
}

/** What redrive moves, and how fast; {} moves every dead letter back to the topic it died on. */
export interface RedriveOptions {
  /** Where to send them; by default each one's origin topic. */
  to?: string;
  /** Only dead letters of this reason: "max-attempts", "nacked" or "sink". */
  reason?: string;
  /** Only these messages (their ids in the dead-letter topic). */
  ids?: string[];
  /** At most this many per second, 1 to 100000; default 1000. */
  ratePerSecond?: number;
  /** At most this many in this call, up to 1000000; default all that wait now. */
  max?: number;
}

/** What one redrive call did. */
export interface RedriveResult {
  /** Moved back by this call. */
  redriven: number;
  /** Left in the dead-letter topic by the filters (reason, ids). */
  skipped: number;
  /** True when the call stopped at max with more to move: call it again to go on. */
  more: boolean;
}

/** The states purge removes. */
export type PurgeState = "pending" | "due" | "dead-lettered";

/** What deleteTopic removed: pending messages cancelled, queue messages removed. */
export interface DeletedTopic {
  cancelled: number;
  removed: number;
}

/** wholeMs checks that n is a whole number of milliseconds of 0 or more, for a field named what. */
export function wholeMs(what: string, n: number): bigint {
  if (!Number.isInteger(n) || n < 0) {
    throw new TypeError(`hourglass: ${what} ${n}: want a whole number of milliseconds, 0 or more`);
  }
  return BigInt(n);
}

/** policyOf turns the API's Policy into a Policy (undefined fields: not set). */
export function policyOf(p: PbPolicy | undefined): Policy {
  const out: Policy = {};
  if (!p) return out;
  if (p.maxAttempts !== undefined) out.maxAttempts = p.maxAttempts;
  if (p.backoff) {
    const b = p.backoff;
    out.backoff = { initialMs: Number(b.initialMs), maxMs: Number(b.maxMs), multiplier: b.multiplier, jitter: b.jitter };
  }
  if (p.paused !== undefined) out.paused = p.paused;
  if (p.maxDispatchRate !== undefined) out.maxDispatchRate = p.maxDispatchRate;
  if (p.leaseMs !== undefined) out.leaseMs = Number(p.leaseMs);
  if (p.flowConcurrency !== undefined) out.flowConcurrency = p.flowConcurrency;
  if (p.flowRate !== undefined) out.flowRate = p.flowRate;
  if (p.flowBurst !== undefined) out.flowBurst = p.flowBurst;
  if (p.flowOrdered !== undefined) out.flowOrdered = p.flowOrdered;
  if (p.flowFair !== undefined) out.flowFair = p.flowFair;
  if (p.freeze !== undefined) out.freeze = p.freeze;
  if (p.expiryDrop !== undefined) out.expiryDrop = p.expiryDrop;
  if (p.expiryUnacked !== undefined) out.expiryUnacked = p.expiryUnacked;
  return out;
}

/** policyInit checks p and builds the API's Policy. */
export function policyInit(p: Policy): MessageInitShape<typeof PolicySchema> {
  const out: MessageInitShape<typeof PolicySchema> = {};
  if (p.maxAttempts !== undefined) {
    if (!Number.isInteger(p.maxAttempts)) throw new TypeError(`hourglass: maxAttempts ${p.maxAttempts}: want a whole number from 1 to 1000`);
    out.maxAttempts = p.maxAttempts;
  }
  if (p.backoff) {
    const b = p.backoff;
    out.backoff = {
      initialMs: wholeMs("backoff.initialMs", b.initialMs),
      maxMs: wholeMs("backoff.maxMs", b.maxMs ?? 0),
      multiplier: b.multiplier ?? 1,
      jitter: b.jitter ?? 0,
    };
  }
  if (p.paused !== undefined) out.paused = p.paused;
  if (p.maxDispatchRate !== undefined) out.maxDispatchRate = p.maxDispatchRate;
  if (p.leaseMs !== undefined) out.leaseMs = wholeMs("leaseMs", p.leaseMs);
  if (p.flowConcurrency !== undefined) out.flowConcurrency = p.flowConcurrency;
  if (p.flowRate !== undefined) out.flowRate = p.flowRate;
  if (p.flowBurst !== undefined) out.flowBurst = p.flowBurst;
  if (p.flowOrdered !== undefined) out.flowOrdered = p.flowOrdered;
  if (p.flowFair !== undefined) out.flowFair = p.flowFair;
  if (p.freeze !== undefined) out.freeze = p.freeze;
  if (p.expiryDrop !== undefined) out.expiryDrop = p.expiryDrop;
  if (p.expiryUnacked !== undefined) out.expiryUnacked = p.expiryUnacked;
  return out;
}

/** defaultsOf names the fields to set back to the server's defaults as the API does. */
export function defaultsOf(fields: PolicyField[]): string[] {
  return fields.map((f) => {
    const name = policyFieldNames[f];
    if (!name) throw new TypeError(`hourglass: policy field ${String(f)}: want one of ${Object.keys(policyFieldNames).join(", ")}`);
    return name;
  });
}

export function topicInfoOf(t: PbTopicInfo): TopicInfo {
  return {
    topic: t.topic,
    due: Number(t.due),
    leased: Number(t.leased),
    deadLettered: Number(t.deadLettered),
    oldestDueAgeMs: t.oldestDueAgeSeconds * 1000,
    policy: policyOf(t.policy),
  };
}

const purgeStates: Record<PurgeState, MessageState> = {
  pending: MessageState.PENDING,
  due: MessageState.DUE,
  "dead-lettered": MessageState.DEAD_LETTERED,
};

/** purgeStateOf is the MessageState purge asks for. */
export function purgeStateOf(state: PurgeState): MessageState {
  const s = purgeStates[state];
  if (s === undefined) throw new TypeError(`hourglass: purge of state ${String(state)}: want pending, due or dead-lettered`);
  return s;
}
