// The API client: the generated HourglassService over Connect-JSON, on
// the server that served the page, with the bearer token the user gave.
// Every call goes through call(), which names the RPC in its errors and
// tells the app when the server wants a token.

import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { HourglassService } from "../../../clients/typescript/src/gen/hourglass/v1/hourglass_pb.js";

export * from "../../../clients/typescript/src/gen/hourglass/v1/hourglass_pb.js";

const tokenKey = "hourglass-console-token";
let token = sessionStorage.getItem(tokenKey) ?? "";

/** setToken keeps the token for this tab (sessionStorage) and sends it from now on. */
export function setToken(t: string): void {
  token = t;
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

export function hasToken(): boolean {
  return token !== "";
}

const bearer: Interceptor = (next) => (req) => {
  if (token) req.header.set("Authorization", `Bearer ${token}`);
  return next(req);
};

/** apiRoot is the server's root: the console is served at <root>/ui/. */
export const apiRoot = new URL("..", location.href).href;

export const api = createClient(
  HourglassService,
  createConnectTransport({ baseUrl: apiRoot.replace(/\/$/, ""), interceptors: [bearer] }),
);

/** RpcError is a failed call: the RPC's name, its status code and message. */
export class RpcError extends Error {
  constructor(
    readonly rpc: string,
    readonly code: Code,
    readonly detail: string,
  ) {
    super(describeFailure(rpc, code, detail));
  }
  get unimplemented(): boolean {
    return this.code === Code.Unimplemented;
  }
}

function describeFailure(rpc: string, code: Code, detail: string): string {
  if (code === Code.Unimplemented) {
    return `${rpc} is not available: this server answers UNIMPLEMENTED (not built on it yet)`;
  }
  return `${rpc} failed: ${codeName(code)}: ${detail}`;
}

/** codeName is a status code as gRPC spells it: INVALID_ARGUMENT. */
export function codeName(code: Code): string {
  return (Code[code] ?? String(code)).replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

let onUnauthenticated: (why: string) => void = () => {};

/** whenUnauthenticated sets what happens when a call lacks the right token. */
export function whenUnauthenticated(f: (why: string) => void): void {
  onUnauthenticated = f;
}

/** call runs one RPC; a failure becomes an RpcError naming it. */
export async function call<T>(rpc: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    const ce = ConnectError.from(e);
    if (ce.code === Code.Unauthenticated) onUnauthenticated(ce.rawMessage);
    throw new RpcError(rpc, ce.code, ce.rawMessage);
  }
}

/** isUnimplemented reports whether e is a call the server does not implement. */
export function isUnimplemented(e: unknown): e is RpcError {
  return e instanceof RpcError && e.unimplemented;
}

/** readiness fetches /readyz: whether the server is ready and why not. */
export async function readiness(): Promise<{ ready: boolean; text: string }> {
  const res = await fetch(new URL("readyz", apiRoot), { cache: "no-store" });
  return { ready: res.ok, text: (await res.text()).trim() };
}
