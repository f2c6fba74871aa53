// consumeStream: the consume loop on a Consume stream (HTTP/2 transports in Node): the server
// pushes batches while the stream holds credits; acks go back as ranges of the messages' numbers
// on the stream and nacks one by one, each settle followed by its credits (creditsFor).

import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import {
  ConsumeNackSchema,
  ConsumeRequestSchema,
  SeqRangeSchema,
  type ConsumeBatch,
  type ConsumeRequest,
} from "./gen/hourglass/v1/hourglass_pb.js";
import type { Delivery, HourglassClient } from "./client.js";

/** What to tell the server of a handled delivery. */
export type Outcome =
  | { ack: true }
  | { ack: false; delayMs?: number; reason?: string; deadLetter?: boolean; release?: boolean };

/** The most messages of one settle, and of one pushed batch. */
const maxSettle = 1000;
export const maxPush = 1000;

/**
 * A stream's window: its credits in all (held by the server or by deliveries not yet settled). It
 * opens at prefetch and moves with how long deliveries waited for a handler since the last settle:
 * under growBelowMs it grows by what was settled (doubling a round trip, up to maxPrefetch), over
 * shrinkAboveMs it shrinks by as much (down to prefetch), so that deliveries wait little beside
 * their leases. A settle with no delivery started since the last holds it (a slow handler's settle
 * comes before the next delivery's wait is known). The Go client moves its window the same way
 * (client.consumeState.credits).
 */
export class Window {
  size: number;
  /** The longest wait since the last settle; -1 when no delivery started since. */
  waitedMs = -1;
  constructor(readonly prefetch: number, readonly maxPrefetch: number) {
    this.size = prefetch;
  }

  /** Notes that a delivery waited waitedMs for a handler. */
  waited(ms: number): void {
    this.waitedMs = Math.max(this.waitedMs, ms);
  }

  /** The credits to give back for n settled messages. */
  creditsFor(n: number): number {
    const waited = this.waitedMs;
    this.waitedMs = -1;
    if (waited < 0) return n;
    if (waited < growBelowMs && this.size < this.maxPrefetch) {
      const k = Math.min(n, this.maxPrefetch - this.size);
      this.size += k;
      return n + k;
    }
    if (waited > shrinkAboveMs && this.size > this.prefetch) {
      const k = Math.min(n, this.size - this.prefetch);
      this.size -= k;
      return n - k;
    }
    return n;
  }
}

const growBelowMs = 100;
const shrinkAboveMs = 1000;

/** Requests is the sending side of a stream: an async iterable fed by push, ended by end. */
class Requests implements AsyncIterable<ConsumeRequest> {
  private items: ConsumeRequest[] = [];
  private wake: (() => void) | undefined;
  private ended = false;

  push(r: ConsumeRequest): void {
    if (this.ended) return;
    this.items.push(r);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ConsumeRequest> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

const hex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** batchDeliveries turns a pushed batch of topic into deliveries and their numbers on the stream. */
export function batchDeliveries(b: ConsumeBatch, topic: string): { d: Delivery; seq: bigint }[] {
  const n = b.bodies.length;
  const fits = (len: number, per = 1) => len === 0 || len === per * n;
  if (
    n === 0 || b.ids.length !== 16 * n || b.deliverAtDeltas.length !== n || !fits(b.attempts.length) ||
    !fits(b.originIds.length, 16) || !fits(b.headerCounts.length) || b.headerKeys.length !== b.headerValues.length ||
    !fits(b.deadLetters.length) || !fits(b.receipts.length)
  ) {
    throw new Error(`hourglass: a pushed batch of ${n} messages whose fields disagree`);
  }
  const receivedAt = new Date(Number(b.receivedAtMs));
  const leaseExpiresAt = new Date(Number(b.leaseExpiresAtMs));
  const out: { d: Delivery; seq: bigint }[] = [];
  let h = 0;
  for (let i = 0; i < n; i++) {
    const id = hex(b.ids.subarray(16 * i, 16 * i + 16));
    let originId = id;
    if (b.originIds.length > 0) {
      const o = b.originIds.subarray(16 * i, 16 * i + 16);
      if (o.some((x) => x !== 0)) originId = hex(o);
    }
    const headers: Record<string, string> = {};
    for (let k = b.headerCounts.length > 0 ? b.headerCounts[i] : 0; k > 0; k--, h++) {
      if (h >= b.headerKeys.length) throw new Error("hourglass: a pushed batch with more header counts than headers");
      headers[b.headerKeys[h]] = b.headerValues[h];
    }
    const d: Delivery = {
      id, originId, topic, headers, body: b.bodies[i],
      deliverAt: new Date(Number(b.deliverAtMs + b.deliverAtDeltas[i])),
      attempt: b.attempts.length > 0 ? b.attempts[i] : 0,
      receivedAt, leaseExpiresAt,
      receipt: b.receipts.length > 0 ? b.receipts[i] : "",
    };
    const dl = b.deadLetters.length > 0 ? b.deadLetters[i] : undefined;
    if (dl && dl.reason !== "") {
      d.deadLetter = {
        originTopic: dl.originTopic, reason: dl.reason, lastError: dl.lastError, attempts: dl.attempts,
        at: dl.at ? new Date(Number(dl.at.seconds) * 1000 + Math.floor(dl.at.nanos / 1e6)) : undefined,
      };
    }
    out.push({ d, seq: b.firstSeq + BigInt(i) });
  }
  return out;
}

export interface StreamOptions {
  concurrency: number;
  prefetch: number;
  /** The most credits the window grows to; prefetch when the caller set prefetch. */
  maxPrefetch: number;
  maxBatch: number;
  leaseMs?: number;
  signal: AbortSignal;
  report: (err: unknown) => void;
  /** Runs the handler on d; never rejects. */
  run: (d: Delivery) => Promise<Outcome>;
  /**
   * Settles by unary calls what a stream that broke cannot. again: d may be settled already (its
   * settle got no answer), and the server's refusal of it as not leased is not an error.
   */
  unary: (d: Delivery, o: Outcome, again?: boolean) => Promise<void>;
}

/**
 * One Consume stream of topic until it ends: when o.signal aborts, messages not started are
 * given back, running handlers finish, their outcomes are settled, and the stream is closed.
 * It rejects with the stream's error when the stream broke (after running handlers finished and
 * were settled by unary calls).
 */
export async function consumeStream(c: HourglassClient, topic: string, o: StreamOptions): Promise<void> {
  const reqs = new Requests();
  reqs.push(create(ConsumeRequestSchema, {
    kind: { case: "open", value: { topic, credits: o.prefetch, leaseMs: BigInt(o.leaseMs ?? 0), maxBatch: o.maxBatch } },
  }));
  const waiting: { d: Delivery; seq: bigint; got: number }[] = [];
  const window = new Window(o.prefetch, o.maxPrefetch);
  const running = new Set<Promise<void>>();
  let outcomes: { d: Delivery; seq: bigint; o: Outcome }[] = [];
  let ref = 0n;
  // Settle requests sent and not answered, by ref: when the stream ends they go again by unary
  // calls (resend), since the server may have lost them.
  const sent = new Map<bigint, { d: Delivery; o: Outcome }[]>();
  const resend = async () => {
    const xs = [...sent.values()].flat();
    sent.clear();
    await Promise.all(xs.map((x) => o.unary(x.d, x.o, true).catch(o.report)));
  };
  let broken = false;
  let closed = false;
  let flushing = false;
  const flush = () => {
    flushing = false;
    while (outcomes.length > 0) {
      const batch = outcomes.splice(0, maxSettle);
      if (broken) {
        for (const x of batch) o.unary(x.d, x.o).catch(o.report);
        continue;
      }
      const acks = batch.filter((x) => x.o.ack).map((x) => x.seq).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      const ranges: { first: bigint; count: number }[] = [];
      for (const seq of acks) {
        const last = ranges[ranges.length - 1];
        if (last && last.first + BigInt(last.count) === seq) last.count++;
        else ranges.push({ first: seq, count: 1 });
      }
      const nacks = batch.flatMap((x) =>
        x.o.ack ? [] : [create(ConsumeNackSchema, {
          seq: x.seq, delayMs: BigInt(Math.ceil(x.o.delayMs ?? 0)), reason: x.o.reason ?? "",
          deadLetter: x.o.deadLetter ?? false, release: x.o.release ?? false,
        })]);
      ref++;
      sent.set(ref, batch.map((x) => ({ d: x.d, o: x.o })));
      reqs.push(create(ConsumeRequestSchema, {
        kind: { case: "settle", value: { ref, acks: ranges.map((r) => create(SeqRangeSchema, r)), nacks } },
      }));
      const credits = window.creditsFor(batch.length);
      if (!o.signal.aborted && credits > 0) reqs.push(create(ConsumeRequestSchema, { kind: { case: "credit", value: { credits } } }));
    }
    maybeClose();
  };
  const settle = (d: Delivery, seq: bigint, out: Outcome) => {
    outcomes.push({ d, seq, o: out });
    if (!flushing) {
      flushing = true;
      setImmediate(flush); // what finishes meanwhile goes in the same settle
    }
  };
  const maybeClose = () => {
    if (o.signal.aborted && !closed && running.size === 0 && waiting.length === 0 && outcomes.length === 0) {
      closed = true;
      reqs.end();
    }
  };
  const pump = () => {
    while (!o.signal.aborted && running.size < o.concurrency && waiting.length > 0) {
      const { d, seq, got } = waiting.shift()!;
      window.waited(performance.now() - got);
      const p: Promise<void> = o.run(d).then((out) => settle(d, seq, out)).finally(() => {
        running.delete(p);
        pump();
        maybeClose();
      });
      running.add(p);
    }
  };
  const giveBack = () => {
    for (const { d, seq } of waiting.splice(0)) settle(d, seq, { ack: false, release: true });
    maybeClose();
  };
  o.signal.addEventListener("abort", giveBack, { once: true });
  // The stream is cancelled only if the server does not end it once the sending side closed.
  const cancel = new AbortController();
  try {
    for await (const res of c.rpc.consume(reqs, { signal: cancel.signal })) {
      switch (res.kind.case) {
        case "batch":
          const got = performance.now();
          for (const x of batchDeliveries(res.kind.value, topic)) waiting.push({ ...x, got });
          if (o.signal.aborted) giveBack();
          else pump();
          break;
        case "settled": {
          const s = res.kind.value;
          sent.delete(s.ref);
          s.failed.forEach((seq, i) => o.report(new Error(`hourglass: settle of message ${seq} of topic ${topic}: ${s.errors[i] ?? "refused"}`)));
          break;
        }
      }
    }
  } catch (err) {
    broken = true;
    // Messages pushed and not started come again after their leases.
    waiting.splice(0);
    await Promise.all(running);
    flush();
    await resend();
    throw ConnectError.from(err);
  } finally {
    o.signal.removeEventListener("abort", giveBack);
    cancel.abort();
  }
  broken = true; // the server ended the stream: whatever is still to settle goes by unary calls
  await Promise.all(running);
  flush();
  await resend();
}
