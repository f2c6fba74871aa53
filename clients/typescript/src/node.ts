// Clients for Node: gRPC over HTTP/2, or Connect and gRPC-Web over HTTP/1.1 (the Connect side of
// an Hourglass server is served on HTTP/1.1 only; docs/API.md).

import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import { HourglassClient, interceptorsOf, type ClientOptions } from "./client.js";

export interface NodeClientOptions extends ClientOptions {
  /** "grpc" (HTTP/2, the default), "connect" or "grpc-web" (both HTTP/1.1). */
  protocol?: "grpc" | "connect" | "grpc-web";
}

/**
 * A client of the server at baseUrl ("http://127.0.0.1:7420", or https:// for TLS) for Node.
 * Close it when done: a gRPC client keeps its HTTP/2 connection open.
 */
export function createNodeClient(baseUrl: string, options: NodeClientOptions = {}): HourglassClient {
  const interceptors = interceptorsOf(options);
  switch (options.protocol ?? "grpc") {
    case "grpc": {
      const sessionManager = new Http2SessionManager(baseUrl);
      const transport = createGrpcTransport({ baseUrl, interceptors, sessionManager });
      return new HourglassClient(transport, () => sessionManager.abort());
    }
    case "connect":
      return new HourglassClient(createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors }));
    case "grpc-web":
      return new HourglassClient(createGrpcWebTransport({ baseUrl, httpVersion: "1.1", interceptors }));
  }
  throw new TypeError(`hourglass: protocol ${String(options.protocol)}: want grpc, connect or grpc-web`);
}
