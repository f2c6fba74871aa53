// Edit: replace a pending message's body and/or headers, keeping its time.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { EditResult as PbEditResult, type EditRequestSchema, type EditResponse } from "./gen/hourglass/v1/hourglass_pb.js";

/**
 * What edit replaces: the body, the message's own headers (all of them; {} removes them), or
 * both. The headers the server set (an idempotency key, a flow key) are kept.
 */
export interface EditInput {
  body?: Uint8Array | string;
  headers?: Record<string, string>;
}

/**
 * What edit did: "edited" (the next delivery carries the new content, under a new id whose
 * originId is the first; the first id and the key go on naming it), or why nothing changed.
 */
export type EditResult =
  | { result: "edited"; id: string; deliverAt: Date }
  | { result: "already-delivered" | "already-cancelled" | "unknown" };

const encoder = new TextEncoder();

/** editInit is the request's change, checked: at least one of body and headers. */
export function editInit(change: EditInput): Pick<MessageInitShape<typeof EditRequestSchema>, "body" | "headers" | "setHeaders"> {
  if (change.body === undefined && change.headers === undefined) {
    throw new TypeError("hourglass: edit: give a new body, new headers, or both");
  }
  return {
    body: typeof change.body === "string" ? encoder.encode(change.body) : change.body,
    headers: Object.entries(change.headers ?? {}).map(([key, value]) => ({ key, value })),
    setHeaders: change.headers !== undefined,
  };
}

/** editResultOf is the server's answer in the client's words. */
export function editResultOf(res: EditResponse): EditResult {
  switch (res.result) {
    case PbEditResult.EDITED:
      return { result: "edited", id: res.id, deliverAt: res.deliverAt ? timestampDate(res.deliverAt) : new Date(0) };
    case PbEditResult.ALREADY_DELIVERED:
      return { result: "already-delivered" };
    case PbEditResult.ALREADY_CANCELLED:
      return { result: "already-cancelled" };
    case PbEditResult.UNKNOWN:
      return { result: "unknown" };
  }
  throw new Error(`hourglass: edit: the server answered result ${res.result}, which this client does not know`);
}
