// consume: a loop that hands each due message of a topic to a handler, at most `concurrency` at
// once, and settles it by the handler's result. On a transport that carries bidirectional streams
// (HTTP/2 in Node) it runs on a Consume stream (cstream.ts); otherwise (browsers, HTTP/1.1) it
// long-polls with Receive, served on every protocol, and acks in batches (AckBatch), nacks one by
// one.

import { Code, ConnectError } from "@connectrpc/connect";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, propagation, trace, type TextMapGetter } from "@opentelemetry/api";
import type { Delivery, HourglassClient } from "./client.js";
import { consumeStream, maxPush, type Outcome } from "./cstream.js";

/** Have the message delivered again after delayMs (a nack with that delay). */
export interface Retry {
  readonly kind: "retry";
  readonly delayMs: number;
  readonly reason: string;
}

/** Send the message to its topic's dead-letter topic "<topic>.dlq" now. */
export interface DeadLetterResult {
  readonly kind: "dead-letter";
  readonly reason: string;
}

/**
 * What a handler returns: nothing (undefined) acks the message; retry(ms) and deadLetter(reason)
 * do what they say. A handler that throws has its message nacked with the error's message as the
 * reason, and the topic's retry backoff on the server decides when it comes back.
 */
export type HandlerResult = void | undefined | Retry | DeadLetterResult;

/** Handles one due message; `signal` is the consume call's, aborted when it stops. */
export type Handler = (d: Delivery, ctx: { signal: AbortSignal }) => HandlerResult | Promise<HandlerResult>;

/** Deliver the message again after delayMs milliseconds (0: the topic's backoff on the server). */
export function retry(delayMs: number, reason?: string): Retry {
  const ms = Math.max(0, Math.ceil(delayMs));
  return { kind: "retry", delayMs: ms, reason: reason ?? `retry after ${ms}ms` };
}

/** Send the message to "<topic>.dlq" now, whatever attempts remain, with reason kept beside it. */
export function deadLetter(reason: string): DeadLetterResult {
  return { kind: "dead-letter", reason };
}

export interface ConsumeOptions {
  /** Handler calls at once; default 1. */
  concurrency?: number;
  /** Lease of each message in milliseconds; default the server's --default-lease. */
  leaseMs?: number;
  /** How long each long poll waits for a message, in milliseconds; default 20000. */
  waitMs?: number;
  /**
   * On a Consume stream: how many messages the server may hand over before they are settled (the
   * stream's credits), 1 to 10000. Unset, a stream starts at 2 * concurrency, at least 100, and
   * grows up to 1000 (or that start) while every delivery finds a handler within 100 ms; once one
   * waits over a second it shrinks back (docs/CLIENTS.md says why).
   */
  prefetch?: number;
  /** On a Consume stream: the most messages the server pushes at once, 1 to 1000; default the most credits the stream may have (at most 1000). */
  maxBatch?: number;
  /** Stops the loop: no message is received after it aborts; running handlers finish and are settled. */
  signal?: AbortSignal;
  /** Told of failed acks and nacks and of polls that failed and are retried; they do not stop consume. */
  onError?: (err: unknown) => void;
}

/** A stream's credits when it opens, and the most they grow to, unless prefetch is set (Window). */
const defaultPrefetch = 100;
const defaultMaxPrefetch = 1000;

/** The most receipts of one AckBatch, and of bytes of a nack's reason. */
const maxAckBatch = 1000;
const maxReason = 1000;

/** Codes worth retrying: the server is away, busy or restarting. */
const transientCodes = new Set([
  Code.Unavailable,
  Code.DeadlineExceeded,
  Code.ResourceExhausted,
  Code.Aborted,
  Code.Internal,
  Code.Unknown,
  Code.Canceled,
]);

export async function consume(c: HourglassClient, topic: string, handler: Handler, o: ConsumeOptions): Promise<void> {
  const concurrency = Math.max(1, Math.floor(o.concurrency ?? 1));
  const signal = o.signal ?? new AbortController().signal;
  const report = (err: unknown) => o.onError?.(err);
  if (c.streams) {
    const prefetch = Math.floor(o.prefetch ?? Math.max(defaultPrefetch, 2 * concurrency));
    const maxPrefetch = o.prefetch === undefined ? Math.max(defaultMaxPrefetch, prefetch) : prefetch;
    const maxBatch = Math.floor(o.maxBatch ?? Math.min(maxPrefetch, maxPush));
    let backoffMs = 100;
    while (!signal.aborted) {
      const opened = Date.now();
      try {
        await consumeStream(c, topic, {
          concurrency, prefetch, maxPrefetch, maxBatch, leaseMs: o.leaseMs, signal, report,
          run: (d) => outcomeOf(handler, d, signal),
          unary: (d, out, again) => settleUnary(c, d, out, again),
        });
      } catch (err) {
        if (signal.aborted) break;
        if (!transientCodes.has(ConnectError.from(err).code)) throw err;
        report(err);
        if (Date.now() - opened > 10_000) backoffMs = 100; // it worked for a while: news, not a failing server
        await sleep(backoffMs, signal);
        backoffMs = Math.min(2 * backoffMs, 5000);
      }
    }
    return;
  }
  const acker = new Acker(c, topic, report);
  const running = new Set<Promise<void>>();
  let backoffMs = 100;
  try {
    while (!signal.aborted) {
      while (running.size >= concurrency) await Promise.race(running);
      if (signal.aborted) break;
      let ds: Delivery[];
      try {
        ds = await c.receive(topic, {
          maxMessages: concurrency - running.size,
          waitMs: o.waitMs ?? 20000,
          leaseMs: o.leaseMs,
          signal,
        });
        backoffMs = 100;
      } catch (err) {
        if (signal.aborted) break;
        if (!transientCodes.has(ConnectError.from(err).code)) throw err;
        report(err);
        await sleep(backoffMs, signal);
        backoffMs = Math.min(2 * backoffMs, 5000);
        continue;
      }
      for (const d of ds) {
        const p: Promise<void> = handle(c, acker, handler, d, signal, report).finally(() => running.delete(p));
        running.add(p);
      }
    }
  } finally {
    await Promise.all(running);
    await acker.drain();
  }
}

/** outcomeOf runs the handler on d and says what its result asks of the server. It never rejects. */
async function outcomeOf(handler: Handler, d: Delivery, signal: AbortSignal): Promise<Outcome> {
  let result: HandlerResult;
  try {
    result = await traced(d, () => handler(d, { signal }));
  } catch (err) {
    return { ack: false, reason: reasonOf(err) };
  }
  if (!result) return { ack: true };
  return result.kind === "retry"
    ? { ack: false, delayMs: result.delayMs, reason: cut(result.reason) }
    : { ack: false, deadLetter: true, reason: cut(result.reason) };
}

/**
 * settleUnary acks or nacks d by a unary call. again: d may be settled already, and the server's
 * refusal of it as not leased (FailedPrecondition) is expected, not an error.
 */
async function settleUnary(c: HourglassClient, d: Delivery, o: Outcome, again = false): Promise<void> {
  try {
    if (o.ack) await c.ack(d);
    else await c.nack(d, o);
  } catch (err) {
    if (!again || ConnectError.from(err).code !== Code.FailedPrecondition) throw err;
  }
}

/** handle runs the handler on d and settles d by its result. It never rejects. */
async function handle(
  c: HourglassClient,
  acker: Acker,
  handler: Handler,
  d: Delivery,
  signal: AbortSignal,
  report: (err: unknown) => void,
): Promise<void> {
  const o = await outcomeOf(handler, d, signal);
  if (o.ack) acker.add(d);
  else await settleUnary(c, d, o).catch(report);
}

/** The headers in which the server hands over the producer's W3C trace context. */
export const traceParentHeader = "hourglass-traceparent";
export const traceStateHeader = "hourglass-tracestate";

/** Reads a delivery's stored trace context as the standard traceparent and tracestate. */
const deliveryGetter: TextMapGetter<Record<string, string>> = {
  keys: () => ["traceparent", "tracestate"],
  get: (h, key) => (key === "traceparent" ? h[traceParentHeader] : key === "tracestate" ? h[traceStateHeader] : undefined),
};

/**
 * Runs f in a span "process <topic>" (kind consumer), a child of the producer's span when d
 * carries its context, on the global OpenTelemetry tracer provider (a no-op until an SDK is
 * registered); the span is active while f runs.
 */
function traced<T>(d: Delivery, f: () => T | Promise<T>): Promise<T> {
  const parent = propagation.extract(ROOT_CONTEXT, d.headers, deliveryGetter);
  const attributes = {
    "messaging.system": "hourglass",
    "messaging.operation.type": "process",
    "messaging.destination.name": d.topic,
    "messaging.message.id": d.id,
    "hourglass.attempt": d.attempt,
  };
  return trace
    .getTracer("@hourglassmq/client")
    .startActiveSpan(`process ${d.topic}`, { kind: SpanKind.CONSUMER, attributes }, parent, async (span) => {
      try {
        return await f();
      } catch (err) {
        span.recordException(err instanceof Error ? err : String(err));
        span.setStatus({ code: SpanStatusCode.ERROR, message: reasonOf(err) });
        throw err;
      } finally {
        span.end();
      }
    });
}

function reasonOf(err: unknown): string {
  return cut(err instanceof Error ? err.message : String(err));
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** cut shortens s to the server's limit of a reason, on a character boundary. */
function cut(s: string): string {
  const b = encoder.encode(s);
  if (b.length <= maxReason) return s;
  let n = maxReason;
  while (n > 0 && (b[n] & 0xc0) === 0x80) n--;
  return decoder.decode(b.subarray(0, n));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Acker acks deliveries with AckBatch calls: those that come while one is in flight go in the next. */
class Acker {
  private waiting: Delivery[] = [];
  private running: Promise<void> | undefined;

  constructor(
    private readonly c: HourglassClient,
    private readonly topic: string,
    private readonly report: (err: unknown) => void,
  ) {}

  add(d: Delivery): void {
    this.waiting.push(d);
    this.running ??= this.loop();
  }

  private async loop(): Promise<void> {
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0, maxAckBatch);
      try {
        const res = await this.c.rpc.ackBatch({ topic: this.topic, receipts: batch.map((d) => d.receipt) });
        res.results.forEach((r, i) => {
          if (!r.acked) this.report(new Error(`hourglass: ack of ${batch[i].id}: ${r.error}`));
        });
      } catch (err) {
        this.report(err);
      }
    }
    this.running = undefined;
  }

  /** drain waits until every delivery added has been acked or reported. */
  async drain(): Promise<void> {
    while (this.running) await this.running;
  }
}
