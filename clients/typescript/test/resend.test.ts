// A Consume stream that breaks after the server read a settle and before it answered: the
// client sends that settle's acks again by unary calls. Against a fake server (connect-node on
// 127.0.0.1 over HTTP/2), since the real one cannot be made to break at that moment.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Http2Server } from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  ConsumeBatchSchema,
  ConsumeResponseSchema,
  HourglassService,
  type ConsumeRequest,
} from "../src/gen/hourglass/v1/hourglass_pb.js";
import { createNodeClient } from "../src/node.js";

const n = 50;
const idOf = (i: number): Uint8Array => {
  const b = new Uint8Array(16);
  new DataView(b.buffer).setUint32(12, i + 1);
  return b;
};
const hexOf = (i: number): string => Array.from(idOf(i), (x) => x.toString(16).padStart(2, "0")).join("");

/**
 * The fake: its first Consume stream pushes n messages, reads one settle request and fails with
 * Unavailable without answering, having applied the settle's acks or not; later streams push
 * nothing. Its unary Ack refuses messages settled already, as the server does.
 */
class Fake {
  streams = 0;
  onStream = new Set<string>();
  acked = new Map<string, number>();
  refused = 0;
  constructor(readonly applied: boolean) {}

  settled(): number {
    return this.onStream.size + this.acked.size;
  }
}

/** The fake's service; the routes are made once, and each call acts on the test's fake. */
const routes = (router: ConnectRouter) =>
  router.service(HourglassService, {
    consume: async function* (reqs: AsyncIterable<ConsumeRequest>) {
      const it = reqs[Symbol.asyncIterator]();
      await it.next(); // open
      const first = ++fake.streams === 1;
      if (!first) {
        for (;;) if ((await it.next()).done) return;
      }
      const ids = new Uint8Array(16 * n);
      for (let i = 0; i < n; i++) ids.set(idOf(i), 16 * i);
      yield create(ConsumeResponseSchema, {
        kind: {
          case: "batch",
          value: create(ConsumeBatchSchema, {
            firstSeq: 1n, topic: "t", ids, bodies: Array.from({ length: n }, () => new Uint8Array()),
            deliverAtDeltas: Array.from({ length: n }, () => 0n),
            receivedAtMs: BigInt(Date.now()), leaseExpiresAtMs: BigInt(Date.now() + 30_000),
          }),
        },
      });
      for (;;) {
        const r = await it.next();
        if (r.done) return;
        if (r.value.kind.case !== "settle") continue;
        if (fake.applied) {
          for (const a of r.value.kind.value.acks) {
            for (let k = 0; k < a.count; k++) fake.onStream.add(hexOf(Number(a.first) - 1 + k));
          }
        }
        throw new ConnectError("node going away", Code.Unavailable);
      }
    },
    ack: async (req) => {
      if (fake.onStream.has(req.id) || fake.acked.has(req.id)) {
        fake.refused++;
        throw new ConnectError("message not leased (unknown, already settled, or its lease expired)", Code.FailedPrecondition);
      }
      fake.acked.set(req.id, 1);
      return {};
    },
  });

let fake: Fake;
let server: Http2Server;
let url: string;

before(async () => {
  server = createServer(connectNodeAdapter({ routes }));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe("a settle the broken stream left unanswered", () => {
  for (const applied of [false, true]) {
    test(`is sent again by Ack (applied by the server: ${applied})`, async () => {
      fake = new Fake(applied);
      const c = createNodeClient(url, { protocol: "grpc" });
      const stop = new AbortController();
      const errors: unknown[] = [];
      const deadline = setTimeout(() => stop.abort(new Error("deadline")), 20000);
      const done = c.consume("t", async () => {}, {
        signal: stop.signal, concurrency: 4, prefetch: n,
        onError: (e) => {
          if (ConnectError.from(e).code !== Code.Unavailable) errors.push(e);
        },
      });
      const poll = setInterval(() => {
        if (fake.settled() === n) stop.abort();
      }, 5);
      try {
        await done;
      } finally {
        clearInterval(poll);
        clearTimeout(deadline);
        c.close?.();
      }
      assert.equal(fake.settled(), n, `${fake.settled()} of ${n} messages settled: the lost settle was not sent again`);
      for (const id of fake.acked.keys()) assert.ok(!fake.onStream.has(id), `${id} acked by Ack after the stream settled it`);
      if (applied) assert.ok(fake.onStream.size > 0 && fake.refused > 0, `settled on the stream ${fake.onStream.size}, refused ${fake.refused}`);
      else assert.equal(fake.refused, 0);
      assert.deepEqual(errors, [], "refusals of acks sent again reported to onError");
    });
  }
});
