// Timeline: pending messages by delivery time, from the next minute to
// years ahead, for one topic or all. For all topics at a bin width of a
// delivery bucket or more it counts Stats' pending buckets; otherwise it
// reads the messages with List (at most `listCap` of them) and bins them.

import { api, call, MessageState, type StatsResponse } from "./api.js";
import { bars, type Chart } from "./chart.js";
import { fill, h, setOptions, unavailable } from "./dom.js";
import { duration, num, time, toDate } from "./format.js";
import { go, loadTopics, type Page } from "./page.js";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";

const ranges: [string, number][] = [
  ["1m", 6e4], ["15m", 9e5], ["1h", 36e5], ["6h", 216e5], ["1d", 864e5],
  ["7d", 6048e5], ["30d", 2592e6], ["1y", 31536e6], ["10y", 315576e6],
];
const widths = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
  172800, 604800, 1209600, 2592000, 7776000, 15724800, 31536000].map((s) => s * 1000);
const maxBins = 120;
const listCap = 10_000;
const pageSize = 1000;

interface Binned {
  start: number; // first bin's start, ms
  width: number; // ms
  counts: number[];
  source: string;
  capped: boolean;
}

export function timelinePage(params: URLSearchParams): Page {
  let topic = params.get("topic") ?? "";
  let span = ranges.find(([k]) => k === params.get("range"))?.[1] ?? 864e5;
  let custom: { from: number; to: number } | null = null;
  const from = Number(params.get("from"));
  const to = Number(params.get("to"));
  if (from > 0 && to > from) custom = { from, to };
  const log = params.get("scale") === "log";

  const select = h("select", { id: "timeline-topic", onchange: () => nav({ topic: select.value }) });
  const rangeBtns = h("div", { class: "segmented", id: "timeline-ranges" },
    ranges.map(([k, ms]) => h("button", {
      type: "button", "data-range": k, class: !custom && ms === span ? "active" : "",
      onclick: () => nav({ range: k, from: "", to: "" }),
    }, k)));
  const chartEl = h("div", { class: "chart", id: "timeline-chart" });
  const summary = h("div", { id: "timeline-summary" }, "Loading…");
  const hot = h("ol", { id: "hotspots" });
  const note = h("div", { id: "timeline-note" });
  const el = h("div", { class: "page timeline" },
    h("section", { class: "card wide" },
      h("div", { class: "toolbar" },
        h("label", null, h("span", null, "Topic"), select),
        h("label", null, h("span", null, "Ahead"), rangeBtns),
        h("label", { class: "check" }, h("input", { type: "checkbox", id: "timeline-log", checked: log, onchange: () => nav({ scale: log ? "" : "log" }) }), h("span", null, "Log scale")),
        custom ? h("button", { type: "button", class: "small", onclick: () => nav({ from: "", to: "" }) }, "Reset zoom") : null),
      h("p", { class: "muted" }, "Drag across the chart to zoom in."),
      chartEl, summary, note),
    h("section", { class: "card wide" }, h("h2", null, "Fullest bars"),
      h("p", { class: "muted" }, `A hot spot holds at least ${hotMin} messages and more than ${hotFactor} times the median of the bars that hold any.`),
      hot));

  function nav(change: Record<string, string>): void {
    const p: Record<string, string> = { topic, range: ranges.find(([, ms]) => ms === span)?.[0] ?? "1d", scale: log ? "log" : "" };
    if (custom) Object.assign(p, { from: String(Math.round(custom.from)), to: String(Math.round(custom.to)) });
    Object.assign(p, change);
    for (const k of Object.keys(p)) if (p[k] === "") delete p[k];
    go("timeline", p);
  }

  let chart: Chart | null = null;

  async function refresh(): Promise<void> {
    const tp = await loadTopics();
    const names = topic && !tp.names.includes(topic) ? [...tp.names, topic] : tp.names;
    setOptions(select, [["", "all topics"], ...names.map((n): [string, string] => [n, n])], topic);

    const now = toDate(tp.stats.serverTime)?.getTime() ?? Date.now();
    const lo = custom ? custom.from : now;
    const hi = custom ? custom.to : now + span;
    const width = widths.find((w) => (hi - lo) / w <= maxBins) ?? widths[widths.length - 1];
    const start = Math.floor(lo / width) * width;
    const n = Math.ceil((hi - start) / width);
    let b: Binned;
    try {
      b = topic === "" && width >= bucketWidth(tp.stats)
        ? fromBuckets(tp.stats, start, width, n, lo, hi)
        : await fromList(topic ? [topic] : tp.names, start, width, n, lo, hi);
    } catch (e) {
      fill(summary, unavailable(e, "The pending messages of this topic"));
      return;
    }
    chart ??= bars(chartEl, "pending", 260, log, (f, t) => nav({ from: String(f * 1000), to: String(t * 1000) }));
    chart.set(b.counts.map((_, i) => (b.start + i * b.width) / 1000), b.counts);

    const total = b.counts.reduce((a, c) => a + c, 0);
    fill(summary,
      h("strong", { id: "timeline-total", "data-total": total }, `${num(total)}${b.capped ? "+" : ""} pending`),
      ` from ${time(new Date(lo))} to ${time(new Date(hi))} (${duration(hi - lo)}), ${topic || "all topics"}; one bar is ${duration(b.width)}.`);
    fill(note, h("small", { class: "muted" }, b.source, b.capped ? ` The first ${num(listCap)} were read: bars after the last one read are incomplete.` : ""));

    const hotSpot = hotSpotRule(b.counts);
    const top = b.counts.map((c, i) => ({ c, i })).filter((x) => x.c > 0).sort((x, y) => y.c - x.c).slice(0, 5);
    fill(hot, top.length
      ? top.map(({ c, i }) => {
        const s = b.start + i * b.width;
        const isHot = hotSpot(c);
        return h("li", { class: isHot ? "hot" : "", "data-count": c, "data-from": s, "data-to": s + b.width },
          h("a", { href: "#", onclick: (ev: Event) => { ev.preventDefault(); nav({ from: String(s), to: String(s + b.width) }); } },
            `${num(c)} due ${timeSpan(s, s + b.width)}`),
          isHot ? h("span", { class: "badge bad" }, "hot spot") : null);
      })
      : h("li", { class: "empty" }, "Nothing pending in this range."));
  }

  return {
    el,
    refresh,
    every: 5000,
    dispose: () => chart?.destroy(),
  };
}

/** A hot spot: a bar of at least hotMin messages, more than hotFactor times the median non-empty bar. */
const hotMin = 10;
const hotFactor = 3;

/**
 * hotSpotRule says which counts are hot spots among counts: measured
 * against the median of the bars that hold any, so that a steady load
 * spread over the range has none, and one second holding a burst is one.
 */
export function hotSpotRule(counts: number[]): (c: number) => boolean {
  const held = counts.filter((c) => c > 0).sort((a, b) => a - b);
  if (held.length < 2) return () => false;
  const mid = held.length >> 1;
  const median = held.length % 2 ? held[mid] : (held[mid - 1] + held[mid]) / 2;
  return (c) => c >= hotMin && c > hotFactor * median;
}

/** timeSpan is a range of times, each with its date, to the second. */
function timeSpan(from: number, to: number): string {
  return `${time(new Date(from)).slice(0, 19)} – ${time(new Date(to)).slice(0, 19)}`;
}

/** bucketWidth is the length of Stats' pending buckets (the server's segment duration). */
function bucketWidth(st: StatsResponse): number {
  const b = st.pending[0];
  const s = toDate(b?.start)?.getTime();
  const e = toDate(b?.end)?.getTime();
  return s !== undefined && e !== undefined && e > s ? e - s : 36e5;
}

function fromBuckets(st: StatsResponse, start: number, width: number, n: number, lo: number, hi: number): Binned {
  const counts = new Array<number>(n).fill(0);
  let approx = false;
  for (const p of st.pending) {
    const s = toDate(p.start)?.getTime() ?? 0;
    const e = toDate(p.end)?.getTime() ?? 0;
    if (e <= lo || s >= hi) continue;
    const i = Math.min(n - 1, Math.max(0, Math.floor((s - start) / width)));
    counts[i] += Number(p.pending);
    approx ||= p.approximate;
  }
  return {
    start, width, counts, capped: false,
    source: `Counted from Stats' pending buckets (${duration(bucketWidth(st))} each)${approx ? "; buckets not loaded yet count cancelled messages too" : ""}.`,
  };
}

async function fromList(topics: string[], start: number, width: number, n: number, lo: number, hi: number): Promise<Binned> {
  const counts = new Array<number>(n).fill(0);
  let read = 0;
  let capped = false;
  for (const topic of topics) {
    let token = "";
    do {
      const res = await call("List", () => api.list({
        topic, state: MessageState.PENDING, from: timestampFromMs(lo), to: timestampFromMs(hi),
        pageToken: token, pageSize: Math.min(pageSize, listCap - read),
      }));
      for (const m of res.messages) {
        const t = toDate(m.deliverAt)?.getTime() ?? lo;
        counts[Math.min(n - 1, Math.max(0, Math.floor((t - start) / width)))]++;
      }
      read += res.messages.length;
      token = res.messages.length ? res.nextPageToken : "";
    } while (token && read < listCap);
    if (token) {
      capped = true;
      break;
    }
  }
  return { start, width, counts, capped, source: `Read with List: ${num(read)} messages.` };
}
