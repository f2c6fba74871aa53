// Clients for Node: gRPC over HTTP/2, or Connect and gRPC-Web over HTTP/1.1 or HTTP/2 (the
// server serves every protocol on both; docs/API.md).

import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { HourglassClient, interceptorsOf, type ClientOptions } from "./client.js";

export interface NodeClientOptions extends ClientOptions {
  /** "grpc" (HTTP/2, the default), "connect" or "grpc-web". */
  protocol?: "grpc" | "connect" | "grpc-web";
  /**
   * The HTTP version of "connect" and "grpc-web": "1.1" (the default: a connection per call in
   * flight) or "2" (one connection for every call, which close() ends). gRPC is always "2".
   */
  httpVersion?: "1.1" | "2";
}

/**
 * A client of the server at baseUrl ("http://127.0.0.1:7420", or https:// for TLS) for Node.
 * Close it when done: a client on HTTP/2 keeps its connection open.
 */
export function createNodeClient(baseUrl: string, options: NodeClientOptions = {}): HourglassClient {
  const interceptors = interceptorsOf(options);
  const protocol = options.protocol ?? "grpc";
  const httpVersion = protocol === "grpc" ? "2" : (options.httpVersion ?? "1.1");
  if (httpVersion !== "1.1" && httpVersion !== "2") {
    throw new TypeError(`hourglass: httpVersion ${String(httpVersion)}: want "1.1" or "2"`);
  }
  if (protocol === "grpc" && options.httpVersion === "1.1") {
    throw new TypeError(`hourglass: gRPC needs HTTP/2: leave httpVersion out, or use protocol "connect" or "grpc-web"`);
  }
  if (httpVersion === "2") {
    const sessionManager = new Http2SessionManager(baseUrl);
    const o = { baseUrl, interceptors, httpVersion, sessionManager } as const;
    const close = () => sessionManager.abort();
    switch (protocol) {
      case "grpc":
        return new HourglassClient(createGrpcTransport(o), close, true);
      case "connect":
        return new HourglassClient(createConnectTransport(o), close, true);
      case "grpc-web":
        return new HourglassClient(createGrpcWebTransport(o), close, true);
    }
  } else {
    switch (protocol) {
      case "connect":
        return new HourglassClient(createConnectTransport({ baseUrl, httpVersion, interceptors }));
      case "grpc-web":
        return new HourglassClient(createGrpcWebTransport({ baseUrl, httpVersion, interceptors }));
    }
  }
  throw new TypeError(`hourglass: protocol ${String(options.protocol)}: want grpc, connect or grpc-web`);
}
