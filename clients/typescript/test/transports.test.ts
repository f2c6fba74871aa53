// Every transport of connect-node against the real server on its one port: Connect and gRPC-Web
// over HTTP/1.1 and HTTP/2, gRPC over HTTP/2, each in plain text and over TLS (a self-signed
// certificate; ALPN h2 or http/1.1). Each makes a unary call and reads a server stream; on
// HTTP/2, Connect and gRPC also a bidirectional stream.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createClient, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { HourglassService } from "../src/gen/hourglass/v1/hourglass_pb.js";
import { startServer, type Server } from "./server.js";

type Kind = "connect" | "grpc-web" | "grpc";

/** A transport of kind over httpVersion to server, and what ends its connection. */
function transport(server: Server, kind: Kind, httpVersion: "1.1" | "2"): [Transport, Http2SessionManager?] {
  const baseUrl = server.url;
  const tls = server.ca ? { ca: server.ca } : {};
  if (httpVersion === "1.1") {
    const o = { baseUrl, httpVersion, nodeOptions: tls } as const;
    return [kind === "connect" ? createConnectTransport(o) : createGrpcWebTransport(o)];
  }
  const sessionManager = new Http2SessionManager(baseUrl, {}, tls);
  const o = { baseUrl, httpVersion, sessionManager } as const;
  const make = { connect: createConnectTransport, "grpc-web": createGrpcWebTransport, grpc: createGrpcTransport }[kind];
  return [make(o), sessionManager];
}

for (const secure of [false, true]) {
  describe(secure ? "tls" : "plain", () => {
    let server: Server;
    before(async () => {
      server = await startServer([], { tls: secure });
    });
    after(async () => {
      await server?.stop();
    });

    const cases: [Kind, "1.1" | "2"][] = [
      ["connect", "1.1"],
      ["connect", "2"],
      ["grpc-web", "1.1"],
      ["grpc-web", "2"],
      ["grpc", "2"],
    ];
    for (const [kind, httpVersion] of cases) {
      test(`${kind} over HTTP/${httpVersion}`, async () => {
        const [t, session] = transport(server, kind, httpVersion);
        const c = createClient(HourglassService, t);
        const topic = `transports-${kind}-${httpVersion}`;
        try {
          const { id } = await c.schedule({ topic, body: new TextEncoder().encode("x") });
          const ctl = new AbortController();
          let got: string | undefined;
          for await (const res of c.receiveStream({ topic }, { signal: ctl.signal, timeoutMs: 10_000 })) {
            got = res.messages[0]?.id;
            break;
          }
          ctl.abort();
          assert.equal(got, id);
          if (session) {
            // The calls went over the HTTP/2 session, which is still there to use.
            assert.notEqual(session.state(), "closed");
          }
          if (httpVersion === "2" && kind !== "grpc-web") {
            async function* one() {
              yield { kind: { case: "message" as const, value: { topic, when: { case: "delayMs" as const, value: 60_000n } } } };
            }
            for await (const res of c.scheduleStream(one(), { timeoutMs: 10_000 })) {
              assert.equal(res.kind.case, "result");
            }
          }
        } finally {
          session?.abort();
        }
      });
    }
  });
}
