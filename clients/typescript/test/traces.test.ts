// Traces: a Schedule inside an active span sends its W3C trace context, the server hands it to the
// consumer, and consume runs the handler in a "process <topic>" span, a child of the producer's.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { context, propagation, trace, SpanKind } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { createNodeClient } from "../src/node.js";
import { startServer, type Server } from "./server.js";

let server: Server;
const exporter = new InMemorySpanExporter();

before(async () => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  server = await startServer(["--segment-duration", "2s"]);
});
after(async () => {
  await server?.stop();
  trace.disable();
  propagation.disable();
  context.disable();
});

for (const protocol of ["grpc", "connect", "grpc-web"] as const) {
  test(`the handler's span is a child of the producer's (${protocol})`, async () => {
    const c = createNodeClient(server.url, { protocol });
    const topic = `traced_${protocol.replace("-", "_")}`;
    const produce = trace.getTracer("test").startSpan("produce");
    const { id } = await context.with(trace.setSpan(context.active(), produce), () => c.schedule({ topic, body: "x", delayMs: 10 }));
    produce.end();
    let carried = "";
    let active = "";
    const stop = new AbortController();
    const deadline = setTimeout(() => stop.abort(), 20000);
    await c.consume(
      topic,
      (d) => {
        carried = d.headers["hourglass-traceparent"] ?? "";
        active = trace.getActiveSpan()?.spanContext().spanId ?? "";
        if (d.id === id) stop.abort();
      },
      { signal: stop.signal, waitMs: 1000 },
    );
    clearTimeout(deadline);
    const p = produce.spanContext();
    assert.equal(carried, `00-${p.traceId}-${p.spanId}-01`, "the consumer got the producer's trace context");
    const span = exporter.getFinishedSpans().find((s) => s.name === `process ${topic}`);
    assert.ok(span, "no process span");
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, p.traceId);
    assert.equal(span.parentSpanContext?.spanId, p.spanId, "the process span's parent is the producer's span");
    assert.equal(active, span.spanContext().spanId, "the process span is active in the handler");
  });
}
