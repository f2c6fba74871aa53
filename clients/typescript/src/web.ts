// Clients for browsers (and anything with fetch): Connect or gRPC-Web over fetch. The server must
// allow the page's origin: hourglass serve --cors-origin https://app.example.com (docs/API.md).

import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { HourglassClient, interceptorsOf, type ClientOptions } from "./client.js";

export interface WebClientOptions extends ClientOptions {
  /** "connect" (the default) or "grpc-web". */
  protocol?: "connect" | "grpc-web";
  /** Protobuf binary instead of JSON on the wire (Connect only; gRPC-Web is always binary). */
  useBinaryFormat?: boolean;
  /** The fetch to use; default globalThis.fetch. */
  fetch?: typeof globalThis.fetch;
}

/** A client of the server at baseUrl ("https://hourglass.example.com") over fetch. */
export function createWebClient(baseUrl: string, options: WebClientOptions = {}): HourglassClient {
  const interceptors = interceptorsOf(options);
  switch (options.protocol ?? "connect") {
    case "connect":
      return new HourglassClient(
        createConnectTransport({ baseUrl, interceptors, useBinaryFormat: options.useBinaryFormat, fetch: options.fetch }),
      );
    case "grpc-web":
      return new HourglassClient(createGrpcWebTransport({ baseUrl, interceptors, fetch: options.fetch }));
  }
  throw new TypeError(`hourglass: protocol ${String(options.protocol)}: want connect or grpc-web`);
}
