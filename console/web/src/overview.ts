// Overview: the server's health and, per topic, its counts, rates and
// policy, with pause, resume and a dispatch rate limit.

import { api, call, readiness, type Policy, type StatsResponse } from "./api.js";
import { lines, type Chart } from "./chart.js";
import { busy, confirm, failed, fill, form, h, notify, row, table, unavailable, type Child } from "./dom.js";
import { bytes, duration, num, rate, time, toDate } from "./format.js";
import { loadTopics, type Page } from "./page.js";

interface Sample {
  t: number; // server time, ms
  scheduled: number;
  delivered: number;
  topics: Map<string, { scheduled: number; delivered: number }>;
}

const historyLength = 300; // samples kept for the charts: 10 minutes at one every 2 s

export function overviewPage(): Page {
  const health = h("section", { id: "health", class: "card" }, h("h2", null, "Server"), h("p", null, "Loading…"));
  const ratesEl = h("div", { class: "chart", id: "rates-chart" });
  const latEl = h("div", { class: "chart" });
  const topicsEl = h("section", { id: "topics", class: "card wide" }, h("h2", null, "Topics"), h("p", null, "Loading…"));
  const el = h("div", { class: "page overview" },
    h("div", { class: "grid" },
      health,
      h("section", { class: "card" }, h("h2", null, "Schedule and delivery rates"), ratesEl),
      h("section", { class: "card" }, h("h2", null, "Lateness of recent deliveries"), latEl)),
    topicsEl);

  let ratesChart: Chart | null = null;
  let latChart: Chart | null = null;
  const hist: { x: number[]; sched: number[]; deliv: number[]; p50: number[]; p99: number[] } = { x: [], sched: [], deliv: [], p50: [], p99: [] };
  let prev: Sample | null = null;

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
    const head = ["Topic", "Due", "Leased", "Dead letters", "Oldest due", "Scheduled", "Delivered", "Policy", ""];
    let rows: HTMLTableRowElement[];
    if (tp.infos) {
      rows = tp.infos.map((t) => {
        const c = counters(t.topic);
        return row({ "data-topic": t.topic }, [
          topicLinks(t.topic), num(t.due), num(t.leased), num(t.deadLettered),
          t.oldestDueAgeSeconds > 0 ? duration(t.oldestDueAgeSeconds * 1000) : "—",
          rateCell(c.sched), rateCell(c.deliv), policyText(t.policy), actions(t.topic, t.policy),
        ]);
      });
    } else {
      rows = tp.names.map((name) => {
        const c = counters(name);
        const dlq = st.topics.find((t) => t.topic === `${name}.dlq`);
        return row({ "data-topic": name }, [
          topicLinks(name), c.ready ? num(c.ready.ready) : "0", c.ready ? num(c.ready.leased) : "0",
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
          ? `${bytes(st.health.dataBytes)} of data · ${bytes(st.health.diskFreeBytes)} free of ${bytes(st.health.diskTotalBytes)}`
          : "—", { id: "disk" })));
  }

  return {
    el,
    refresh,
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

function policyText(p: Policy | undefined): Child {
  if (!p) return "defaults";
  const parts: Child[] = [];
  if (p.paused) parts.push(h("span", { class: "badge paused" }, "paused"));
  if (p.maxDispatchRate !== undefined && p.maxDispatchRate > 0) parts.push(` ≤ ${rate(p.maxDispatchRate)}`);
  if (p.maxAttempts !== undefined) parts.push(` ${p.maxAttempts} attempts`);
  if (p.leaseMs !== undefined) parts.push(` lease ${duration(Number(p.leaseMs))}`);
  return parts.length ? parts : "defaults";
}

function actions(topic: string, p: Policy | undefined): HTMLElement {
  const paused = p?.paused === true;
  const pauseBtn = h("button", {
    class: paused ? "small resume" : "small pause", type: "button", "data-verb": "manage",
    onclick: () => (paused ? setPaused(topic, false, pauseBtn) : pause(topic, pauseBtn)),
  }, paused ? "Resume" : "Pause");
  const rateBtn = h("button", { class: "small rate", type: "button", "data-verb": "manage", onclick: () => setRate(topic, p, rateBtn) }, "Rate…");
  const polBtn = h("button", { class: "small policy", type: "button", onclick: () => showPolicy(topic, polBtn) }, "Policy");
  return h("span", { class: "actions" }, pauseBtn, rateBtn, polBtn);
}

async function pause(topic: string, btn: HTMLButtonElement): Promise<void> {
  const ok = await confirm(`Pause ${topic}?`,
    "Nothing of this topic is handed to consumers until it is resumed; pending messages keep their times and due ones wait.", "Pause");
  if (ok) await setPaused(topic, true, btn);
}

async function setPaused(topic: string, paused: boolean, btn: HTMLButtonElement): Promise<void> {
  await busy(btn, async () => {
    try {
      await call("SetPolicy", () => api.setPolicy({ topic, policy: { paused } }));
      notify("ok", `${topic} ${paused ? "paused" : "resumed"}`);
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

async function showPolicy(topic: string, btn: HTMLButtonElement): Promise<void> {
  await busy(btn, async () => {
    try {
      const res = await call("GetPolicy", () => api.getPolicy({ topic }));
      const line = (p: Policy | undefined) => [
        `max attempts ${p?.maxAttempts ?? "default"}`,
        `lease ${p?.leaseMs !== undefined ? duration(Number(p.leaseMs)) : "default"}`,
        `rate ${p?.maxDispatchRate ? rate(p.maxDispatchRate) : "no limit"}`,
        p?.paused ? "paused" : "not paused",
        p?.backoff ? `backoff ${duration(Number(p.backoff.initialMs))} ×${p.backoff.multiplier} up to ${duration(Number(p.backoff.maxMs))}` : "no backoff set",
      ].join(" · ");
      await confirm(`Policy of ${topic}`, h("dl", null,
        h("div", { class: "kv" }, h("dt", null, "Set on the topic"), h("dd", null, line(res.policy))),
        h("div", { class: "kv" }, h("dt", null, "In effect"), h("dd", null, line(res.effective)))), "Close");
    } catch (e) {
      failed(e);
    }
  });
}
