// Formatting of times, counts, sizes and message bodies.

import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { h } from "./dom.js";

const nf = new Intl.NumberFormat("en-US");
const nf1 = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

/** num formats a count: 1,234,567. */
export function num(n: number | bigint): string {
  return nf.format(n);
}

/** rate formats a per-second rate: 12.5/s. */
export function rate(n: number): string {
  return `${nf1.format(n)}/s`;
}

/** bytes formats a size: 1.5 MiB. */
export function bytes(n: number | bigint): string {
  let v = Number(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : nf1.format(v)} ${units[i]}`;
}

const pad = (n: number, w = 2) => String(n).padStart(w, "0");

/** time formats a moment in local time, to the millisecond. */
export function time(d: Date): string {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** toDate is a Timestamp as a Date, or null when unset. */
export function toDate(ts: Timestamp | undefined): Date | null {
  return ts ? timestampDate(ts) : null;
}

/** duration formats milliseconds compactly: 2d 3h, 5m 10s, 250 ms. */
export function duration(ms: number): string {
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(a)} ms`;
  const s = Math.floor(a / 1000);
  const parts: [number, string][] = [
    [Math.floor(s / 31536000), "y"],
    [Math.floor((s % 31536000) / 86400), "d"],
    [Math.floor((s % 86400) / 3600), "h"],
    [Math.floor((s % 3600) / 60), "m"],
    [s % 60, "s"],
  ];
  const first = parts.findIndex(([v]) => v > 0);
  return parts
    .slice(first, first + 2)
    .filter(([v]) => v > 0)
    .map(([v, u]) => `${v}${u}`)
    .join(" ");
}

/** when shows a moment with how far it is from now; its title is UTC. */
export function when(ts: Timestamp | undefined, now = Date.now()): HTMLElement | string {
  const d = toDate(ts);
  if (!d) return "—";
  const diff = d.getTime() - now;
  const rel = Math.abs(diff) < 1000 ? "now" : diff > 0 ? `in ${duration(diff)}` : `${duration(diff)} ago`;
  return h("span", { class: "when", title: d.toISOString() }, time(d), h("small", null, ` (${rel})`));
}

/** toLocalInput is a Date as a datetime-local input's value. */
export function toLocalInput(d: Date): string {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** parseDuration reads "90s", "5m", "2h", "1d", "1h30m" as milliseconds; NaN if it cannot. */
export function parseDuration(s: string): number {
  const re = /(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)/g;
  const unit: Record<string, number> = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5, w: 6048e5, y: 31536e6 };
  let total = 0;
  let rest = s.trim();
  if (rest === "") return NaN;
  for (const m of s.matchAll(re)) {
    total += parseFloat(m[1]) * unit[m[2]];
    rest = rest.replace(m[0], "");
  }
  return rest.trim() === "" ? total : NaN;
}

/** shortId shows the end of a message ID (the start is the delivery time). */
export function shortId(id: string): HTMLElement {
  return h("code", { class: "id", title: id }, id);
}

const maxShown = 64 << 10;

/** bodyText decodes a body as UTF-8 text, or null if it is not. */
export function bodyText(b: Uint8Array): string | null {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b.subarray(0, maxShown));
  } catch {
    return null;
  }
}

/** bodyJSON pretty-prints a JSON body, or null if it is not JSON. */
export function bodyJSON(b: Uint8Array): string | null {
  const t = bodyText(b);
  if (t === null || b.length > maxShown) return null;
  try {
    return JSON.stringify(JSON.parse(t), null, 2);
  } catch {
    return null;
  }
}

/** bodyHex is a hex dump: offset, 16 bytes, and their printable characters. */
export function bodyHex(b: Uint8Array): string {
  const lines: string[] = [];
  const n = Math.min(b.length, maxShown);
  for (let off = 0; off < n; off += 16) {
    const chunk = b.subarray(off, Math.min(off + 16, n));
    const hex = Array.from(chunk, (x) => x.toString(16).padStart(2, "0")).join(" ");
    const ascii = Array.from(chunk, (x) => (x >= 32 && x < 127 ? String.fromCharCode(x) : ".")).join("");
    lines.push(`${off.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join("\n");
}

/** truncatedNote says when a body is longer than what is shown. */
export function truncatedNote(b: Uint8Array): string | null {
  return b.length > maxShown ? `showing the first ${bytes(maxShown)} of ${bytes(b.length)}` : null;
}

const previewChars = 60;

/** bodyPreview is the start of a body as text (or its size, when it is not text), with its size. */
export function bodyPreview(b: Uint8Array): HTMLElement {
  const size = bytes(b.length);
  if (b.length === 0) return h("span", { class: "preview muted" }, "empty");
  let t: string | null;
  try {
    // stream: a character cut at the slice's end is not an error.
    t = new TextDecoder("utf-8", { fatal: true }).decode(b.subarray(0, previewChars * 4), { stream: true });
  } catch {
    t = null;
  }
  if (t === null) return h("span", { class: "preview muted", title: size }, `binary, ${size}`);
  const flat = t.replace(/\s+/g, " ").trim();
  const cut = [...flat].length > previewChars || b.length > previewChars * 4;
  const shown = cut ? `${[...flat].slice(0, previewChars).join("")}…` : flat;
  return h("span", { class: "preview", title: size }, h("code", null, shown), h("small", null, ` ${size}`));
}

/** internalPrefix starts the headers the server sets (idempotency, dead letters, retries). */
export const internalPrefix = "hourglass-";

/** userHeaders are a message's headers without the server's own. */
export function userHeaders<T extends { key: string }>(hs: T[]): T[] {
  return hs.filter((x) => !x.key.startsWith(internalPrefix));
}

/** internalHeaders are the headers the server set on a message. */
export function internalHeaders<T extends { key: string }>(hs: T[]): T[] {
  return hs.filter((x) => x.key.startsWith(internalPrefix));
}
