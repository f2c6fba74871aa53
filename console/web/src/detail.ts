// One message: its state, fields, headers and body (text, JSON or hex),
// and what can be done to it (cancel, reschedule, edit, promote).

import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  api, call, CancelResult, FreezeResult, MessageState, RescheduleResult,
  type GetRequest, type GetResponse, type Message, type RescheduleRequest,
} from "./api.js";
import { busy, confirm, failed, fill, form, h, notify, unavailable, type Child } from "./dom.js";
import {
  bodyHex, bodyJSON, bodyText, bytes, duration, internalHeaders, parseDuration, shortId, toDate, toLocalInput, truncatedNote,
  userHeaders, when,
} from "./format.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { editOne } from "./edit.js";
import type { GetRequestSchema, RescheduleRequestSchema } from "./api.js";

/** enumName is an enum value's name without its prefix: CANCELLED. */
export function enumName(e: Record<number, string>, v: number, prefix: string): string {
  const n = e[v] ?? String(v);
  return n.startsWith(prefix) ? n.slice(prefix.length) : n;
}

export function stateName(s: MessageState): string {
  return MessageState[s] ?? String(s);
}

/** openDetail looks a message up (by id, or topic and key) and shows it in el. */
export async function openDetail(el: HTMLElement, req: MessageInitShape<typeof GetRequestSchema>, onChange?: () => void): Promise<void> {
  fill(el, h("p", null, "Loading…"));
  el.hidden = false;
  let res: GetResponse;
  try {
    res = await call("Get", () => api.get(req));
  } catch (e) {
    fill(el, unavailable(e, "Looking the message up"));
    return;
  }
  renderDetail(el, res, req as GetRequest, onChange);
  el.scrollIntoView({ block: "nearest" });
}

function renderDetail(el: HTMLElement, res: GetResponse, req: GetRequest, onChange?: () => void): void {
  const m = res.message;
  const state = stateName(res.state);
  const close = h("button", { type: "button", class: "small", onclick: () => { el.hidden = true; fill(el); } }, "Close");
  if (!m || res.state === MessageState.NOT_FOUND) {
    fill(el, h("div", { class: "detail-head" }, h("h2", null, "Message"), close),
      h("p", { id: "detail-state", "data-state": state }, `Not found: ${req.id || `topic ${req.topic}, key ${req.key}`} is not held by this server (never scheduled here, or its bucket was deleted once done).`));
    return;
  }
  const kv = (k: string, v: Child) => h("div", { class: "kv" }, h("dt", null, k), h("dd", null, v));
  const dl = m.deadLetter;
  const reload = () => openDetail(el, { id: m.id }, onChange);
  const pending = res.state === MessageState.PENDING;
  // Frozen on its own (FreezeMessage): held with the delay it keeps.
  const frozenLeft = m.frozenRemainingMs === undefined ? null : Number(m.frozenRemainingMs);
  const reopen = (id: string) => { void openDetail(el, { id }, onChange); onChange?.(); };
  const actionBar = h("div", { class: "actions" },
    pending ? h("button", { id: "act-cancel", type: "button", "data-verb": "cancel", class: "danger", onclick: (ev: Event) => cancelOne(m, ev.currentTarget as HTMLButtonElement, reload, onChange) }, "Cancel message") : null,
    pending ? h("button", { id: "act-reschedule", type: "button", "data-verb": "cancel", onclick: (ev: Event) => rescheduleOne(el, m, ev.currentTarget as HTMLButtonElement, onChange) }, "Reschedule…") : null,
    pending ? h("button", { id: "act-edit", type: "button", "data-verb": "cancel", onclick: (ev: Event) => editOne(m, ev.currentTarget as HTMLButtonElement, (id) => { void openDetail(el, { id }, onChange); onChange?.(); }) }, "Edit…") : null,
    pending ? h("button", { id: frozenLeft === null ? "act-freeze" : "act-thaw", type: "button", "data-verb": "cancel", onclick: (ev: Event) => freezeOne(m, frozenLeft !== null, ev.currentTarget as HTMLButtonElement, reopen) }, frozenLeft === null ? "Freeze" : "Thaw") : null,
    pending ? h("button", { id: "act-promote", type: "button", "data-verb": "cancel", onclick: (ev: Event) => promoteOne(el, m, ev.currentTarget as HTMLButtonElement, onChange) }, "Deliver now") : null,
    res.state === MessageState.DEAD_LETTERED && res.deadLetterTopic
      ? h("button", { id: "act-redrive", type: "button", "data-verb": "manage", onclick: (ev: Event) => redriveOne(m, res.deadLetterTopic, ev.currentTarget as HTMLButtonElement, reload, onChange) }, "Redrive")
      : null,
    h("button", { type: "button", class: "small", onclick: reload }, "Reload"));
  const body = h("pre", { id: "detail-body", class: "body" });
  const views: [string, () => string | null][] = [
    ["text", () => bodyText(m.body)],
    ["json", () => bodyJSON(m.body)],
    ["hex", () => bodyHex(m.body)],
  ];
  const tabs = h("div", { class: "segmented", id: "body-views" });
  const showView = (name: string) => {
    const v = views.find(([n]) => n === name)!;
    const text = v[1]();
    body.textContent = text ?? (name === "json" ? "(not JSON)" : "(not UTF-8 text: see hex)");
    body.dataset.view = name;
    for (const b of tabs.querySelectorAll("button")) b.classList.toggle("active", b.dataset.view === name);
  };
  fill(tabs, views.map(([n]) => h("button", { type: "button", "data-view": n, onclick: () => showView(n) }, n.toUpperCase())));
  fill(el,
    h("div", { class: "detail-head" }, h("h2", null, "Message ", shortId(m.id)), close),
    h("p", null, h("span", { id: "detail-state", class: `badge state-${state.toLowerCase()}`, "data-state": state }, state)),
    actionBar,
    h("dl", null,
      kv("Topic", m.topic),
      frozenLeft !== null
        ? kv("Frozen", h("span", { id: "detail-frozen" }, `${duration(frozenLeft)} left: due ${duration(frozenLeft)} after it is thawed`))
        : kv("Deliver at", when(m.deliverAt)),
      kv("Attempt", String(m.attempt)),
      m.originId && m.originId !== m.id ? kv("Origin", shortId(m.originId)) : null,
      res.state === MessageState.LEASED ? kv("Lease ends", when(res.leaseExpiresAt)) : null,
      res.queueAttempt ? kv("Queue attempts", String(res.queueAttempt)) : null,
      res.deadLetterTopic ? kv("Dead-letter topic", res.deadLetterTopic) : null,
      // Get by an earlier ID answers for the message as it is now: under
      // the ID of its latest incarnation (a retry, a reschedule).
      res.rescheduledTo ? kv("Now as", h("a", { id: "detail-now-as", href: "#", onclick: (ev: Event) => { ev.preventDefault(); openDetail(el, { id: res.rescheduledTo }, onChange); } }, res.rescheduledTo)) : null,
      dl ? kv("Dead letter", h("span", { id: "detail-dead-letter" }, `${dl.reason} on ${dl.originTopic} after ${dl.attempts} attempts${dl.lastError ? `: ${dl.lastError}` : ""}`)) : null,
      kv("Body", bytes(m.body.length))),
    h("h3", null, "Headers"),
    headerTable(userHeaders(m.headers), "detail-headers"),
    internalHeaders(m.headers).length ? [h("h3", null, "Internal"), headerTable(internalHeaders(m.headers), "detail-internal")] : null,
    h("h3", null, "Body"),
    tabs,
    truncatedNote(m.body) ? h("small", { class: "muted" }, truncatedNote(m.body)) : null,
    body);
  showView(bodyJSON(m.body) !== null ? "json" : bodyText(m.body) !== null ? "text" : "hex");
}

function headerTable(hs: { key: string; value: string }[], id: string): HTMLElement {
  return hs.length
    ? h("table", { class: "headers", id }, h("tbody", null, hs.map((x) => h("tr", null, h("th", null, x.key), h("td", null, x.value)))))
    : h("p", { class: "muted", id }, "none");
}

async function redriveOne(m: Message, dlq: string, btn: HTMLButtonElement, reload: () => void, onChange?: () => void): Promise<void> {
  const to = m.deadLetter?.originTopic || m.topic;
  if (!(await confirm("Redrive this dead letter?", `${m.id} goes back to ${to} from ${dlq} as a new first attempt.`, "Redrive"))) return;
  await busy(btn, async () => {
    try {
      const res = await call("Redrive", () => api.redrive({ deadLetterTopic: dlq, ids: [m.id], maxMessages: 1 }));
      notify(res.redriven > 0n ? "ok" : "err", res.redriven > 0n ? `Redriven: ${m.id} is back in ${to}` : `Redrive ${m.id}: not in ${dlq} any more`);
      reload();
      onChange?.();
    } catch (e) {
      failed(e);
    }
  });
}

/** freezeOne freezes a pending message (its clock stops, its remaining delay kept) or thaws a frozen one. */
async function freezeOne(m: Message, thaw: boolean, btn: HTMLButtonElement, reopen: (id: string) => void): Promise<void> {
  await busy(btn, async () => {
    try {
      if (thaw) {
        const res = await call("ThawMessage", () => api.thawMessage({ id: m.id }));
        const at = toDate(res.deliverAt);
        notify(res.result === FreezeResult.THAWED ? "ok" : "err", res.result === FreezeResult.THAWED
          ? `Thawed: now ${res.id}${at ? `, due in ${duration(at.getTime() - Date.now())}` : ""}`
          : `Thaw ${m.id}: ${enumName(FreezeResult, res.result, "")}`);
        if (res.result === FreezeResult.THAWED) reopen(res.id);
        return;
      }
      const res = await call("FreezeMessage", () => api.freezeMessage({ id: m.id }));
      notify(res.result === FreezeResult.FROZEN ? "ok" : "err", res.result === FreezeResult.FROZEN
        ? `Frozen: now ${res.id}, ${duration(Number(res.remainingMs))} left until it is thawed`
        : `Freeze ${m.id}: ${enumName(FreezeResult, res.result, "")}`);
      if (res.result === FreezeResult.FROZEN) reopen(res.id);
    } catch (e) {
      failed(e);
    }
  });
}

async function cancelOne(m: Message, btn: HTMLButtonElement, reload: () => void, onChange?: () => void): Promise<void> {
  if (!(await confirm("Cancel this message?", `${m.id} on ${m.topic} will never be delivered.`, "Cancel message", "Keep"))) return;
  await busy(btn, async () => {
    try {
      const res = await call("Cancel", () => api.cancel({ id: m.id }));
      const r = enumName(CancelResult, res.result, "");
      notify(res.result === CancelResult.CANCELLED ? "ok" : "err", `Cancel ${m.id}: ${r}`);
      reload();
      onChange?.();
    } catch (e) {
      failed(e);
    }
  });
}

/** newTime asks for a new delivery time: an absolute one, or a delay from now. */
export async function askNewTime(title: string, current: Date | null): Promise<RescheduleRequest["when"] | null> {
  const v = await form(title, [
    { name: "at", label: "New time (local)", type: "datetime-local", value: current ? toLocalInput(current) : "" },
    { name: "delay", label: "Or a delay from now", placeholder: "10m, 2h, 3d", hint: "A delay, when given, wins over the time." },
  ], "Reschedule");
  if (!v) return null;
  if (v.delay.trim()) {
    const ms = parseDuration(v.delay);
    if (Number.isNaN(ms)) {
      notify("err", `delay ${v.delay}: write it as 90s, 10m, 2h or 3d`);
      return null;
    }
    return { case: "delayMs", value: BigInt(Math.round(ms)) };
  }
  const d = new Date(v.at);
  if (Number.isNaN(d.getTime())) {
    notify("err", "Give a new time or a delay.");
    return null;
  }
  return { case: "deliverAt", value: timestampFromDate(d) };
}

async function rescheduleOne(el: HTMLElement, m: Message, btn: HTMLButtonElement, onChange?: () => void): Promise<void> {
  const w = await askNewTime(`Reschedule ${m.id}`, toDate(m.deliverAt));
  if (w) await reschedule(el, m, { id: m.id, when: w }, btn, onChange);
}

async function promoteOne(el: HTMLElement, m: Message, btn: HTMLButtonElement, onChange?: () => void): Promise<void> {
  if (!(await confirm("Deliver this message now?", `${m.id} on ${m.topic} is delivered at once instead of at its time.`, "Deliver now"))) return;
  await reschedule(el, m, { id: m.id, when: { case: "now", value: true } }, btn, onChange);
}

async function reschedule(el: HTMLElement, m: Message, req: MessageInitShape<typeof RescheduleRequestSchema>, btn: HTMLButtonElement, onChange?: () => void): Promise<void> {
  await busy(btn, async () => {
    try {
      const res = await call("Reschedule", () => api.reschedule(req));
      if (res.result === RescheduleResult.RESCHEDULED) {
        const at = toDate(res.deliverAt);
        notify("ok", `Rescheduled: now ${res.id}${at ? `, due in ${duration(at.getTime() - Date.now())}` : ""}`);
        await openDetail(el, { id: res.id }, onChange);
      } else {
        notify("err", `Reschedule ${m.id}: ${enumName(RescheduleResult, res.result, "")}`);
      }
      onChange?.();
    } catch (e) {
      failed(e);
    }
  });
}
