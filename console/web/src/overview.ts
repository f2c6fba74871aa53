// Overview: the server's health and, per topic, its counts, rates and
// policy, with pause, resume and a dispatch rate limit.

import { api, call, MessageState, readiness, type GetPolicyResponse, type Policy, type StatsResponse, type TopicInfo } from "./api.js";
import { lines, type Chart } from "./chart.js";
import { busy, failed, fill, form, h, notify, row, table, unavailable, type Child, type Field } from "./dom.js";
import { bytes, duration, num, parseDuration, rate, time, toDate } from "./format.js";
import { loadTopics, type Page } from "./page.js";

interface Sample {
  t: number; // server time, ms
  scheduled: number;
  delivered: number;
  topics: Map<string, { scheduled: number; delivered: number }>;
}

const historyLength = 300;

/** pendingCap bounds how many pending messages of a topic the overview counts with List. */
const pendingCap = 10_000;
/** pendingEvery is how often (ms) the overview counts a topic's pending messages again. */
const pendingEvery = 30_000;

interface PendingCount {
  n: number; // -1 until counted
  capped: boolean;
  at: number; // when the count started, ms
}

/**
 * countPending counts a topic's pending messages by paging through List
 * (the engine counts pending per delivery bucket, not per topic), at most
 * pendingCap of them, again pendingEvery ms after the last count. The
 * table shows the count the next time it is drawn.
 */
function countPending(counts: Map<string, PendingCount>, topic: string): void {
  const c = counts.get(topic);
  const now = Date.now();
  if (c && now - c.at < pendingEvery) return;
  const next: PendingCount = { n: c?.n ?? -1, capped: c?.capped ?? false, at: now };
  counts.set(topic, next);
  void (async () => {
    let n = 0;
    let token = "";
    do {
      const res = await call("List", () => api.list({ topic, state: MessageState.PENDING, pageToken: token, pageSize: 1000 }));
      n += res.messages.length;
      token = res.messages.length ? res.nextPageToken : "";
    } while (token && n < pendingCap);
    next.n = n;
    next.capped = token !== "";
  })().catch(() => {});
} // samples kept for the charts: 10 minutes at one every 2 s

export function overviewPage(): Page {
  const health = h("section", { id: "health", class: "card" }, h("h2", null, "Server"), h("p", null, "Loading…"));
  const ratesEl = h("div", { class: "chart", id: "rates-chart" });
  const latEl = h("div", { class: "chart" });
  const topicsEl = h("section", { id: "topics", class: "card wide" }, h("h2", null, "Topics"), h("p", null, "Loading…"));
  const el = h("div", { class: "page overview" },
    h("div", { class: "grid" },
      health,
      h("section", { class: "card" }, h("h2", null, "Schedule and delivery rates"), ratesEl,
        h("small", { class: "muted", id: "rates-note" }, "Sampled while this page is open: the first rates in a second.")),
      h("section", { class: "card" }, h("h2", null, "Lateness of recent deliveries"), latEl)),
    topicsEl);

  let ratesChart: Chart | null = null;
  let latChart: Chart | null = null;
  const hist: { x: number[]; sched: number[]; deliv: number[]; p50: number[]; p99: number[] } = { x: [], sched: [], deliv: [], p50: [], p99: [] };
  let prev: Sample | null = null;
  const pending = new Map<string, PendingCount>();

  function sample(st: StatsResponse): Sample {
    const topics = new Map<string, { scheduled: number; delivered: number }>();
    for (const t of st.topics) topics.set(t.topic, { scheduled: Number(t.scheduled), delivered: Number(t.delivered) });
    return {
      t: toDate(st.serverTime)?.getTime() ?? Date.now(),
      scheduled: Number(st.engine?.scheduled ?? 0n),
      delivered: Number(st.engine?.delivered ?? 0n),
      topics,
    };
  }

  async function refresh(): Promise<void> {
    const [tp, ready] = await Promise.all([loadTopics(), readiness().catch((e) => ({ ready: false, text: String(e) }))]);
    const st = tp.stats;
    const cur = sample(st);
    const dt = prev ? (cur.t - prev.t) / 1000 : 0;
    const perSec = (a: number, b: number) => (dt > 0 ? Math.max(0, (a - b) / dt) : NaN);
    if (prev && dt > 0) {
      hist.x.push(cur.t / 1000);
      hist.sched.push(perSec(cur.scheduled, prev.scheduled));
      hist.deliv.push(perSec(cur.delivered, prev.delivered));
      hist.p50.push(st.lateness?.p50Ms ?? 0);
      hist.p99.push(st.lateness?.p99Ms ?? 0);
      for (const k of Object.keys(hist) as (keyof typeof hist)[]) hist[k].splice(0, hist[k].length - historyLength);
    }
    ratesChart ??= lines(ratesEl, ["scheduled/s", "delivered/s"], 180, "", 600);
    latChart ??= lines(latEl, ["p50", "p99"], 180, " ms", 600);
    ratesChart.set(hist.x, hist.sched, hist.deliv);
    latChart.set(hist.x, hist.p50, hist.p99);
    ratesEl.dataset.samples = String(hist.x.length);
    if (hist.x.length === 1) {
      fill(el.querySelector("#rates-note")!, `Sampled every 2 s since ${time(new Date(hist.x[0] * 1000)).slice(11, 19)}, while this page is open; the last 10 minutes are kept.`);
    }

    renderHealth(st, ready);

    const counters = (topic: string) => {
      const c = cur.topics.get(topic);
      const p = prev?.topics.get(topic);
      return {
        sched: c && p ? perSec(c.scheduled, p.scheduled) : NaN,
        deliv: c && p ? perSec(c.delivered, p.delivered) : NaN,
        ready: st.topics.find((t) => t.topic === topic),
      };
    };
    const rateCell = (v: number) => (Number.isNaN(v) ? "…" : rate(v));
    const head = ["Topic", "Pending", "Due", "Leased", "Dead letters", "Oldest due", "Scheduled", "Delivered", "Policy", ""];
    for (const name of tp.names) countPending(pending, name);
    const pendingCell = (topic: string) => {
      const c = pending.get(topic);
      return h("span", { class: "pending", title: c?.capped ? `more than ${num(pendingCap)}: counted with List up to there` : "counted with List" },
        !c || c.n < 0 ? "…" : c.capped ? `${num(c.n)}+` : num(c.n));
    };
    let rows: HTMLTableRowElement[];
    if (tp.infos) {
      rows = tp.infos.map((t) => {
        const c = counters(t.topic);
        return row({ "data-topic": t.topic }, [
          topicLinks(t.topic), pendingCell(t.topic), [num(t.due), flowHeld(t)], num(t.leased), num(t.deadLettered),
          t.oldestDueAgeSeconds > 0 ? duration(t.oldestDueAgeSeconds * 1000) : "—",
          rateCell(c.sched), rateCell(c.deliv), policyText(t.policy), actions(t.topic, t.policy),
        ]);
      });
    } else {
      rows = tp.names.map((name) => {
        const c = counters(name);
        const dlq = st.topics.find((t) => t.topic === `${name}.dlq`);
        return row({ "data-topic": name }, [
          topicLinks(name), pendingCell(name), c.ready ? num(c.ready.ready) : "0", c.ready ? num(c.ready.leased) : "0",
          dlq ? num(dlq.ready) : "0", "?", rateCell(c.sched), rateCell(c.deliv), "?", actions(name, undefined),
        ]);
      });
    }
    fill(topicsEl,
      h("h2", null, "Topics"),
      tp.infos ? null : unavailable(tp.topicsErr, "The oldest due message and the policy per topic (“?” below)"),
      rows.length ? table(head, rows) : h("p", { class: "empty" }, "No topics yet: schedule a message to create one."));
    prev = cur;
  }

  function renderHealth(st: StatsResponse, ready: { ready: boolean; text: string }): void {
    const e = st.engine;
    const l = st.lateness;
    const now = toDate(st.serverTime);
    const skew = now ? now.getTime() - Date.now() : 0;
    const kv = (k: string, v: Child, attrs?: Record<string, string>) => h("div", { class: "kv", ...attrs }, h("dt", null, k), h("dd", null, v));
    fill(health,
      h("h2", null, "Server"),
      h("dl", null,
        kv("Readiness", ready.ready
          ? h("span", { class: "badge ok", id: "readiness" }, "ready")
          : h("span", { class: "badge bad", id: "readiness" }, `not ready: ${ready.text}`)),
        kv("Server clock", now ? `${time(now)} (${Math.abs(skew) < 1000 ? "in step with this browser" : `${duration(skew)} ${skew > 0 ? "ahead of" : "behind"} this browser`})` : "—"),
        kv("Reput lag", e ? bytes(e.reputLagBytes) : "—"),
        kv("Lateness", l && l.count > 0n ? `p50 ${l.p50Ms.toFixed(1)} ms · p90 ${l.p90Ms.toFixed(1)} ms · p99 ${l.p99Ms.toFixed(1)} ms · max ${l.maxMs.toFixed(1)} ms (${num(l.count)} recent)` : "no recent deliveries"),
        kv("Messages", e ? `${num(e.scheduled)} scheduled · ${num(e.delivered)} delivered · ${num(e.cancelled)} cancelled · ${num(e.inflight)} in flight` : "—"),
        kv("Wheel", e ? `${num(e.pendingLoaded)} pending in ${e.loadedBuckets} loaded buckets · ${e.segments} segments` : "—"),
        kv("Damage", e && (e.corrupt > 0n || e.unconfirmed > 0n) ? h("span", { class: "badge bad" }, `${num(e.corrupt)} corrupt, ${num(e.unconfirmed)} unconfirmed`) : "none seen"),
        kv("Fsync", st.health && st.health.fsyncCount > 0n
          ? `p50 ${st.health.fsyncP50Ms.toFixed(2)} ms · p99 ${st.health.fsyncP99Ms.toFixed(2)} ms (${num(st.health.fsyncCount)} recent)`
          : "no recent fsyncs", { id: "fsync" }),
        kv("Disk", st.health && st.health.diskTotalBytes > 0n
          ? `data directory: ${bytes(st.health.dataAllocatedBytes)} on disk (allocated, as du counts) · ${bytes(st.health.dataBytes)} of file size (segments are preallocated) · file system: ${bytes(st.health.diskFreeBytes)} free of ${bytes(st.health.diskTotalBytes)}`
          : "—", { id: "disk" })));
  }

  return {
    el,
    refresh,
    // The first rates need two samples: the second comes half a second
    // after the first, the others every 2 s.
    get every() {
      return hist.x.length === 0 ? 500 : 2000;
    },
    dispose() {
      ratesChart?.destroy();
      latChart?.destroy();
    },
  };
}

function topicLinks(topic: string): HTMLElement {
  const q = encodeURIComponent(topic);
  return h("span", { class: "topic" }, h("strong", null, topic), h("br"),
    h("small", null,
      h("a", { href: `#/timeline?topic=${q}` }, "timeline"), " · ",
      h("a", { href: `#/messages?topic=${q}` }, "messages"), " · ",
      h("a", { href: `#/deadletters?topic=${q}` }, "dead letters")));
}

/** flowHeld is what a topic's flow policy holds back: how many due messages of how many keys, and the largest backlogs by key. */
function flowHeld(t: TopicInfo): Child {
  if (t.flowHeld <= 0n && t.flowBacklogs.length === 0) return null;
  return h("details", { class: "flow-held" },
    h("summary", null, ` ${num(t.flowHeld)} held by ${num(t.flowKeysHeld)} key${t.flowKeysHeld === 1n ? "" : "s"}`),
    table(["Flow key", "Due", "Leased", "Held by"], t.flowBacklogs.map((b) => [h("code", null, b.flowKey), num(b.due), num(b.leased), b.heldBy || "—"])));
}

function policyText(p: Policy | undefined): Child {
  if (!p) return "defaults";
  const parts: Child[] = [];
  if (p.freeze) parts.push(h("span", { class: "badge paused frozen" }, "frozen"));
  else if (p.paused) parts.push(h("span", { class: "badge paused" }, "paused"));
  if (p.maxDispatchRate !== undefined && p.maxDispatchRate > 0) parts.push(` ≤ ${rate(p.maxDispatchRate)}`);
  if (p.maxAttempts !== undefined) parts.push(` ${p.maxAttempts} attempts`);
  if (p.leaseMs !== undefined) parts.push(` lease ${duration(Number(p.leaseMs))}`);
  const flow: string[] = [];
  if (p.flowConcurrency) flow.push(`${p.flowConcurrency} at a time`);
  if (p.flowRate) flow.push(`≤ ${rate(p.flowRate)}${p.flowBurst ? ` (burst ${p.flowBurst})` : ""}`);
  if (p.flowOrdered) flow.push("in order");
  if (p.flowFair) flow.push("keys in turn");
  if (flow.length) parts.push(h("span", { class: "flow-policy" }, ` per flow key: ${flow.join(", ")}`));
  if (p.expiryDrop || p.expiryUnacked) {
    parts.push(` expired ${p.expiryDrop ? "dropped" : "dead-lettered"}${p.expiryUnacked ? " unless acked by then" : ""}`);
  }
  return parts.length ? parts : "defaults";
}

function actions(topic: string, p: Policy | undefined): HTMLElement {
  const paused = p?.paused === true;
  const pauseBtn = h("button", {
    class: paused ? "small resume" : "small pause", type: "button", "data-verb": "manage",
    onclick: () => (paused ? setPaused(topic, false, pauseBtn) : pause(topic, pauseBtn)),
  }, paused ? "Resume" : "Pause");
  const rateBtn = h("button", { class: "small rate", type: "button", "data-verb": "manage", onclick: () => setRate(topic, p, rateBtn) }, "Rate…");
  const polBtn = h("button", { class: "small policy", type: "button", "data-verb": "manage", onclick: () => showPolicy(topic, polBtn) }, "Policy");
  return h("span", { class: "actions" }, pauseBtn, rateBtn, polBtn);
}

async function pause(topic: string, btn: HTMLButtonElement): Promise<void> {
  const v = await form(`Pause ${topic}?`, [{
    name: "mode", label: "Pending messages", value: "keep",
    options: [["keep", "keep their times (due ones wait)"], ["freeze", "freeze: the clock stops"]],
    hint: "Frozen, every message scheduled before the pause and not yet due is due as much later as the pause lasted.",
  }], "Pause", "Nothing of this topic is handed to consumers until it is resumed.");
  if (v) await setPaused(topic, true, btn, v.mode === "freeze");
}

async function setPaused(topic: string, paused: boolean, btn: HTMLButtonElement, freeze = false): Promise<void> {
  await busy(btn, async () => {
    try {
      await call("SetPolicy", () => api.setPolicy({ topic, policy: freeze ? { paused, freeze } : { paused } }));
      notify("ok", `${topic} ${freeze ? "frozen" : paused ? "paused" : "resumed"}`);
    } catch (e) {
      failed(e);
    }
  });
}

async function setRate(topic: string, p: Policy | undefined, btn: HTMLButtonElement): Promise<void> {
  const v = await form(`Dispatch rate of ${topic}`, [{
    name: "rate", label: "Messages per second (0: no limit)", type: "number",
    value: String(p?.maxDispatchRate ?? 0), hint: "A token bucket with a burst of one second.",
  }], "Set");
  if (!v) return;
  const r = Number(v.rate);
  if (!Number.isFinite(r) || r < 0) return void notify("err", `rate ${v.rate}: a number, 0 or more`);
  await busy(btn, async () => {
    try {
      await call("SetPolicy", () => api.setPolicy(r === 0 ? { topic, defaults: ["max_dispatch_rate"] } : { topic, policy: { maxDispatchRate: r } }));
      notify("ok", r === 0 ? `${topic}: no rate limit` : `${topic}: at most ${rate(r)}`);
    } catch (e) {
      failed(e);
    }
  });
}

/** policyFields are the policy dialog's fields: empty means the server's default. */
function policyFields(p: Policy | undefined, eff: Policy | undefined): Field[] {
  const b = p?.backoff;
  const eb = eff?.backoff;
  const dur = (ms: bigint | undefined) => (ms === undefined ? "" : duration(Number(ms)).replace(/ /g, ""));
  const def = (v: string) => `default: ${v}`;
  return [
    { name: "maxAttempts", label: "Max attempts (1 to 1000)", type: "number", value: p?.maxAttempts?.toString() ?? "", placeholder: def(String(eff?.maxAttempts ?? "")) },
    { name: "lease", label: "Lease (1ms to 12h)", value: dur(p?.leaseMs), placeholder: def(dur(eff?.leaseMs)) },
    { name: "rate", label: "Max dispatch rate per second (0: no limit)", type: "number", value: p?.maxDispatchRate?.toString() ?? "", placeholder: def(String(eff?.maxDispatchRate ?? 0)) },
    { name: "backoffInitial", label: "Retry backoff: first delay", value: b ? dur(b.initialMs) : "", placeholder: eb ? def(dur(eb.initialMs)) : "none: retried at once" },
    { name: "backoffMax", label: "Retry backoff: at most", value: b ? dur(b.maxMs) : "", placeholder: eb ? def(dur(eb.maxMs)) : "" },
    { name: "backoffMultiplier", label: "Retry backoff: multiplier (1 to 10)", type: "number", value: b ? String(b.multiplier) : "", placeholder: eb ? def(String(eb.multiplier)) : "2" },
    { name: "backoffJitter", label: "Retry backoff: jitter (0 to 1)", type: "number", value: b ? String(b.jitter) : "", placeholder: eb ? def(String(eb.jitter)) : "0" },
    {
      name: "expiry", label: "A message past its expiry", value: p?.expiryDrop ? "drop" : "dead-letter",
      options: [["dead-letter", "is dead-lettered, reason expired (default)"], ["drop", "is dropped"]],
    },
    {
      name: "expireUnless", label: "A message expires unless by its expiry it is", value: p?.expiryUnacked ? "acked" : "received",
      options: [["received", "received (an ack after it succeeds; default)"], ["acked", "acked (an ack after it is refused)"]],
    },
  ];
}

/**
 * policyChange reads the dialog's values as a SetPolicy request: a field
 * given is set, one left empty goes back to the server's default. It
 * throws an Error that names a value it cannot read.
 */
export function policyChange(v: Record<string, string>): { policy: Partial<Policy>; defaults: string[] } {
  const policy: Partial<Policy> = {};
  const defaults: string[] = [];
  const num = (name: string, label: string) => {
    const n = Number(v[name]);
    if (!Number.isFinite(n)) throw new Error(`${label} ${v[name]}: a number`);
    return n;
  };
  const ms = (name: string, label: string) => {
    const d = parseDuration(v[name]);
    if (Number.isNaN(d)) throw new Error(`${label} ${v[name]}: write it as 500ms, 30s, 5m or 2h`);
    return BigInt(Math.round(d));
  };
  if (v.maxAttempts.trim()) policy.maxAttempts = num("maxAttempts", "max attempts");
  else defaults.push("max_attempts");
  if (v.lease.trim()) policy.leaseMs = ms("lease", "lease");
  else defaults.push("lease_ms");
  if (v.rate.trim()) policy.maxDispatchRate = num("rate", "rate");
  else defaults.push("max_dispatch_rate");
  if (v.backoffInitial.trim()) {
    const initialMs = ms("backoffInitial", "first delay");
    policy.backoff = {
      $typeName: "hourglass.v1.Backoff",
      initialMs,
      maxMs: v.backoffMax.trim() ? ms("backoffMax", "at most") : initialMs,
      multiplier: v.backoffMultiplier.trim() ? num("backoffMultiplier", "multiplier") : 2,
      jitter: v.backoffJitter.trim() ? num("backoffJitter", "jitter") : 0,
    };
  } else defaults.push("backoff");
  if (v.expiry === "drop") policy.expiryDrop = true;
  else defaults.push("expiry_drop");
  if (v.expireUnless === "acked") policy.expiryUnacked = true;
  else defaults.push("expiry_unacked");
  return { policy, defaults };
}

async function showPolicy(topic: string, btn: HTMLButtonElement): Promise<void> {
  let res: GetPolicyResponse;
  try {
    res = await busy(btn, () => call("GetPolicy", () => api.getPolicy({ topic })));
  } catch (e) {
    failed(e);
    return;
  }
  const v = await form(`Policy of ${topic}`, policyFields(res.policy, res.effective), "Save",
    h("p", { class: "muted" }, "A field left empty takes the server's default. Pause and resume with the topic's own button."));
  if (!v) return;
  let change: ReturnType<typeof policyChange>;
  try {
    change = policyChange(v);
  } catch (e) {
    failed(e);
    return;
  }
  await busy(btn, async () => {
    try {
      await call("SetPolicy", () => api.setPolicy({ topic, policy: change.policy, defaults: change.defaults }));
      notify("ok", `Policy of ${topic} saved`);
    } catch (e) {
      failed(e);
    }
  });
}
