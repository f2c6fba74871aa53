// Freezing one message: its clock stops until it is thawed, its remaining delay kept.

import { timestampDate } from "@bufbuild/protobuf/wkt";
import { FreezeResult as PbFreezeResult, type FreezeMessageResponse, type ThawMessageResponse } from "./gen/hourglass/v1/hourglass_pb.js";

/**
 * What freezeMessage did: "frozen" (never delivered until thawed, under a new id whose originId
 * is the first; the first id and the key go on naming it; remainingMs is the delay it keeps), or
 * why nothing changed.
 */
export type FreezeMessageResult =
  | { result: "frozen"; id: string; remainingMs: number }
  | { result: "already-frozen" | "already-delivered" | "already-cancelled" | "unknown" };

/** What thawMessage did: "thawed" (due its remaining delay from now, at deliverAt, under a new id), or why nothing changed. */
export type ThawMessageResult =
  | { result: "thawed"; id: string; deliverAt: Date }
  | { result: "not-frozen" | "already-delivered" | "already-cancelled" | "unknown" };

type Refused = "already-frozen" | "not-frozen" | "already-delivered" | "already-cancelled" | "unknown";

function refusedOf(rpc: string, r: PbFreezeResult): Refused {
  switch (r) {
    case PbFreezeResult.ALREADY_FROZEN:
      return "already-frozen";
    case PbFreezeResult.NOT_FROZEN:
      return "not-frozen";
    case PbFreezeResult.ALREADY_DELIVERED:
      return "already-delivered";
    case PbFreezeResult.ALREADY_CANCELLED:
      return "already-cancelled";
    case PbFreezeResult.UNKNOWN:
      return "unknown";
  }
  throw new Error(`hourglass: ${rpc}: the server answered result ${r}, which this client does not know`);
}

/** freezeResultOf is the server's answer to freezeMessage in the client's words. */
export function freezeResultOf(res: FreezeMessageResponse): FreezeMessageResult {
  if (res.result === PbFreezeResult.FROZEN) {
    return { result: "frozen", id: res.id, remainingMs: Number(res.remainingMs) };
  }
  const r = refusedOf("freezeMessage", res.result);
  if (r === "not-frozen") throw new Error("hourglass: freezeMessage: the server answered not-frozen");
  return { result: r };
}

/** thawResultOf is the server's answer to thawMessage in the client's words. */
export function thawResultOf(res: ThawMessageResponse): ThawMessageResult {
  if (res.result === PbFreezeResult.THAWED) {
    return { result: "thawed", id: res.id, deliverAt: res.deliverAt ? timestampDate(res.deliverAt) : new Date(0) };
  }
  const r = refusedOf("thawMessage", res.result);
  if (r === "already-frozen") throw new Error("hourglass: thawMessage: the server answered already-frozen");
  return { result: r };
}
