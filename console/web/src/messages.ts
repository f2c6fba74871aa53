// Messages: a topic's pending, due, leased or dead-lettered messages a page
// at a time; a message looked up by ID or by topic and key; and bulk
// cancel, reschedule, promote or purge of a selection or of everything
// the filter matches, after a confirmation.

import { timestampDate, timestampFromDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { api, call, CancelResult, isUnimplemented, MessageState, RescheduleResult, type ListResponse, type Message } from "./api.js";
import { enumName, openDetail } from "./detail.js";
import { busy, confirm, failed, fill, form, h, notify, row, setOptions, table, unavailable } from "./dom.js";
import { bodyPreview, num, parseDuration, shortId, userHeaders, when } from "./format.js";
import { go, loadTopics, replaceRoute, type Page } from "./page.js";

const states: [string, MessageState][] = [
  ["pending", MessageState.PENDING],
  ["due", MessageState.DUE],
  ["leased", MessageState.LEASED],
  ["dead-lettered", MessageState.DEAD_LETTERED],
];

export function messagesPage(params: URLSearchParams): Page {
  const topic = params.get("topic") ?? "";
  const stateKey = states.some(([k]) => k === params.get("state")) ? params.get("state")! : "pending";
  const state = states.find(([k]) => k === stateKey)![1];
  const fromP = params.get("from") ?? "";
  const toP = params.get("to") ?? "";
  const pending = state === MessageState.PENDING;

  // The topic is picked from those the server knows; refresh fills the
  // list, and with no topic in the URL, shows the first.
  const topicIn = h("select", { id: "msg-topic", onchange: () => filter.requestSubmit() },
    topic ? h("option", { value: topic, selected: true }, topic) : h("option", { value: "" }, "loading topics…"));
  const names = h("datalist", { id: "topic-names" });
  const stateIn = h("select", { id: "msg-state" }, states.map(([k]) => h("option", { value: k, selected: k === stateKey }, k)));
  const fromIn = h("input", { id: "msg-from", type: "datetime-local", step: "1", value: fromP, disabled: !pending });
  const toIn = h("input", { id: "msg-to", type: "datetime-local", step: "1", value: toP, disabled: !pending });
  stateIn.addEventListener("change", () => {
    fromIn.disabled = toIn.disabled = stateIn.value !== "pending";
  });
  const filter = h("form", { class: "toolbar", id: "msg-filter" },
    h("label", null, h("span", null, "Topic"), topicIn, names),
    h("label", null, h("span", null, "State"), stateIn),
    h("label", null, h("span", null, "Due from"), fromIn),
    h("label", null, h("span", null, "to"), toIn),
    h("button", { type: "submit", id: "msg-show" }, "Show"));
  filter.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p: Record<string, string> = { topic: topicIn.value.trim(), state: stateIn.value };
    if (!fromIn.disabled && fromIn.value) p.from = fromIn.value;
    if (!toIn.disabled && toIn.value) p.to = toIn.value;
    go("messages", p);
  });

  const idIn = h("input", { id: "lookup-id", placeholder: "message ID (32 hex digits)", pattern: "[0-9a-f]{32}" });
  const keyTopicIn = h("input", { id: "lookup-topic", placeholder: "topic", list: "topic-names" });
  const keyIn = h("input", { id: "lookup-key", placeholder: "idempotency key" });
  const detail = h("section", { id: "detail", class: "card wide", hidden: true });
  const lookup = h("form", { class: "toolbar", id: "lookup" },
    h("label", null, h("span", null, "By ID"), idIn),
    h("label", null, h("span", null, "or by topic and key"), h("span", { class: "pair" }, keyTopicIn, keyIn)),
    h("button", { type: "submit", id: "lookup-go" }, "Look up"));
  lookup.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = idIn.value.trim();
    if (id) openDetail(detail, { id }, () => void refresh());
    else if (keyTopicIn.value.trim() && keyIn.value) openDetail(detail, { topic: keyTopicIn.value.trim(), key: keyIn.value }, () => void refresh());
    else notify("err", "Give an ID, or a topic and a key.");
  });

  const selected = new Set<string>();
  const listEl = h("div", { id: "msg-list" }, "Loading…");
  const selInfo = h("span", { id: "sel-info" });
  const scope = h("select", { id: "bulk-scope" },
    h("option", { value: "selected" }, "the selected messages"),
    h("option", { value: "all" }, "every message the filter matches"));
  const progress = h("div", { id: "bulk-progress", class: "muted" });
  const bulkBtn = (id: string, label: string, f: (b: HTMLButtonElement) => void, danger = false, verb = "cancel") =>
    h("button", { type: "button", id, class: danger ? "danger" : "", "data-verb": verb, onclick: (ev: Event) => f(ev.currentTarget as HTMLButtonElement) }, label);
  // Leased messages are their consumers' (only a receipt acks, nacks or
  // extends one, and List gives none): nothing to select or act on.
  const leased = state === MessageState.LEASED;
  const bulk = leased
    ? h("p", { class: "muted", id: "leased-note" }, "Leased messages are held by the consumers that received them: only a consumer, with its receipt, can ack, nack or extend one. Each is due again when its lease ends.")
    : h("div", { class: "toolbar bulk" },
    selInfo, h("label", null, h("span", null, "Apply to"), scope),
    pending ? bulkBtn("bulk-cancel", "Cancel messages…", (b) => runBulk("cancel", b), true) : null,
    pending ? bulkBtn("bulk-reschedule", "Shift…", (b) => runBulk("shift", b)) : null,
    pending ? bulkBtn("bulk-promote", "Deliver now", (b) => runBulk("promote", b)) : null,
    bulkBtn("bulk-purge", `Purge all ${stateKey}`, (b) => purge(b), true, "manage"));
  let token = params.get("page") ?? "";
  const pager = h("div", { class: "toolbar pager" },
    h("button", { type: "button", id: "msg-first", class: "small", onclick: () => { token = ""; void refresh(); } }, "First page"),
    h("button", { type: "button", id: "msg-next", class: "small", disabled: true, onclick: () => { token = nextToken; void refresh(); } }, "Next page"));
  let nextToken = "";

  const el = h("div", { class: "page messages" },
    h("section", { class: "card wide" }, filter, lookup),
    detail,
    h("section", { class: "card wide" }, topic ? bulk : null, progress, listEl, topic ? pager : null));

  async function loadNames(): Promise<void> {
    const tp = await loadTopics();
    fill(names, tp.names.map((n) => h("option", { value: n })));
    if (!topic && tp.names.length) {
      replaceRoute("messages", { topic: tp.names[0], state: stateKey });
      return;
    }
    const list = topic && !tp.names.includes(topic) ? [...tp.names, topic] : tp.names;
    setOptions(topicIn, list.length ? list.map((n): [string, string] => [n, n]) : [["", "no topics yet"]], topic);
    if (!topic) fill(listEl, h("p", { class: "empty" }, "No topics yet: schedule a message to create one."));
  }

  const localTime = (s: string) => (s ? timestampFromDate(new Date(s)) : undefined);
  const listPage = (pageToken: string, pageSize = 100): Promise<ListResponse> =>
    call("List", () => api.list({ topic, state, from: localTime(fromP), to: localTime(toP), pageToken, pageSize }));

  let running = false;
  let shown: Message[] = [];

  async function refresh(): Promise<void> {
    await loadNames().catch((e) => fill(listEl, unavailable(e, "Listing topics")));
    if (!topic || running) return;
    let res: ListResponse;
    try {
      res = await listPage(token);
    } catch (e) {
      fill(listEl, unavailable(e, `Listing ${stateKey} messages`));
      return;
    }
    shown = res.messages;
    nextToken = res.messages.length ? res.nextPageToken : "";
    (pager.querySelector("#msg-next") as HTMLButtonElement).disabled = !nextToken;
    const now = Date.now();
    const all = h("input", { type: "checkbox", id: "sel-all", "aria-label": "select all on this page" });
    all.checked = shown.length > 0 && shown.every((m) => selected.has(m.id));
    all.addEventListener("change", () => {
      for (const m of shown) all.checked ? selected.add(m.id) : selected.delete(m.id);
      for (const c of listEl.querySelectorAll<HTMLInputElement>("input.sel")) c.checked = all.checked;
      updateSel();
    });
    const extraHead = leased ? "Lease ends" : state === MessageState.DEAD_LETTERED ? "Why" : "Headers";
    const rows = shown.map((m) => {
      const cb = leased ? null : h("input", { type: "checkbox", class: "sel", "aria-label": `select ${m.id}` });
      if (cb) {
        cb.checked = selected.has(m.id);
        cb.addEventListener("change", () => {
          cb.checked ? selected.add(m.id) : selected.delete(m.id);
          updateSel();
        });
      }
      const extra = leased ? when(m.leaseExpiresAt, now)
        : m.deadLetter ? `${m.deadLetter.reason}${m.deadLetter.lastError ? `: ${m.deadLetter.lastError}` : ""}`
        : userHeaders(m.headers).map((x) => `${x.key}=${x.value}`).join(", ") || "—";
      const open = h("a", { href: "#", class: "open", onclick: (ev: Event) => { ev.preventDefault(); openDetail(detail, { id: m.id }, () => void refresh()); } }, shortId(m.id));
      return row({ "data-id": m.id }, [
        ...(leased ? [] : [cb]), open, when(m.deliverAt, now), String(m.attempt), extra, bodyPreview(m.body),
      ]);
    });
    fill(listEl, rows.length
      ? table([...(leased ? [] : [all]), "ID", "Deliver at", "Attempt", extraHead, "Body"], rows, { id: "msg-table" })
      : h("p", { class: "empty" }, `No ${stateKey} messages in ${topic}${fromP || toP ? " in this time range" : ""}.`));
    updateSel();
  }

  function updateSel(): void {
    selInfo.textContent = `${num(selected.size)} selected`;
  }

  /**
   * targets are the messages a bulk action applies to: the selected ones,
   * or every one the filter matches, all read before the action starts (a
   * message it shifts later must not be listed, and shifted, again).
   */
  async function targets(): Promise<Message[]> {
    if (scope.value === "selected") {
      const byId = new Map(shown.map((m) => [m.id, m]));
      const ms: Message[] = [];
      for (const id of selected) {
        const m = byId.get(id) ?? (await call("Get", () => api.get({ id }))).message;
        if (m) ms.push(m);
      }
      return ms;
    }
    const ms: Message[] = [];
    let t = "";
    do {
      const res = await listPage(t, 1000);
      ms.push(...res.messages);
      progress.textContent = `reading the messages the filter matches: ${num(ms.length)}`;
      t = res.messages.length ? res.nextPageToken : "";
    } while (t);
    return ms;
  }

  async function runBulk(kind: "cancel" | "shift" | "promote", btn: HTMLButtonElement): Promise<void> {
    if (scope.value === "selected" && selected.size === 0) return void notify("err", "Select messages first, or apply to every message the filter matches.");
    let shiftMs = 0;
    let at: ReturnType<typeof timestampFromMs> | null = null;
    if (kind === "shift") {
      const w = await askShift();
      if (w === null) return;
      if (typeof w === "number") shiftMs = w;
      else at = w;
    }
    running = true;
    try {
      let ms: Message[];
      try {
        ms = await busy(btn, targets);
      } catch (e) {
        failed(e);
        return;
      }
      const what = scope.value === "selected" ? `the ${num(ms.length)} selected messages`
        : `all ${num(ms.length)} pending messages of ${topic}${fromP || toP ? " in the chosen time range" : ""}`;
      const verb = kind === "cancel" ? "Cancel" : kind === "promote" ? "Deliver now" : at ? "Reschedule" : "Shift";
      const detailText = kind === "cancel" ? "They will never be delivered."
        : kind === "promote" ? "They are delivered at once instead of at their times."
        : at ? `They are all delivered at ${timestampDate(at).toISOString()}.` : `Each moves by ${shiftMs >= 0 ? "+" : ""}${shiftMs / 1000}s from its own time.`;
      progress.textContent = "";
      if (ms.length === 0) return void notify("err", "No messages to act on.");
      const action = kind === "cancel" ? `Cancel ${num(ms.length)} message${ms.length === 1 ? "" : "s"}` : verb;
      if (!(await confirm(`${verb} ${what}?`, detailText, action, kind === "cancel" ? "Keep" : "Back"))) return;
      let done = 0;
      let failedN = 0;
      let firstErr: unknown = null;
      await busy(btn, async () => {
        for (const m of ms) {
          try {
            (await actOn(kind, m, shiftMs, at)) ? done++ : failedN++;
          } catch (e) {
            failedN++;
            firstErr ??= e;
            if (isUnimplemented(e)) break;
          }
          progress.textContent = `${verb}: ${num(done)} done, ${num(failedN)} not, of ${num(ms.length)}`;
        }
      });
      progress.textContent = `${verb}: ${num(done)} done, ${num(failedN)} not${firstErr ? ` (first error: ${(firstErr as Error).message})` : ""}`;
      notify(failedN ? "err" : "ok", progress.textContent);
      selected.clear();
    } finally {
      running = false;
    }
    await refresh();
  }

  async function purge(btn: HTMLButtonElement): Promise<void> {
    if (!topic) return;
    const ok = await confirm(`Purge every ${stateKey} message of ${topic}?`,
      state === MessageState.PENDING ? "Every pending message of the topic is cancelled, whatever its time (the time filter does not apply)." : "They are removed from the queue for good.",
      "Purge");
    if (!ok) return;
    await busy(btn, async () => {
      try {
        const res = await call("Purge", () => api.purge({ topic, state }));
        notify("ok", `Purged ${num(res.purged)} ${stateKey} messages of ${topic}`);
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  }

  return { el, refresh, every: 5000 };
}

/** askShift asks how to move messages: by a signed duration (ms) or to one time. */
async function askShift(): Promise<number | ReturnType<typeof timestampFromMs> | null> {
  const v = await form("Reschedule messages", [
    { name: "shift", label: "Move each by", placeholder: "+1h, -10m, 2d", hint: "From each message's own time; or leave empty and give a time." },
    { name: "at", label: "Or all to (local time)", type: "datetime-local" },
  ], "Next");
  if (!v) return null;
  const s = v.shift.trim();
  if (s) {
    const sign = s.startsWith("-") ? -1 : 1;
    const ms = parseDuration(s.replace(/^[+-]/, ""));
    if (Number.isNaN(ms)) {
      notify("err", `shift ${s}: write it as +1h, -10m or 2d`);
      return null;
    }
    return sign * ms;
  }
  const d = new Date(v.at);
  if (Number.isNaN(d.getTime())) {
    notify("err", "Give a shift or a time.");
    return null;
  }
  return timestampFromDate(d);
}

async function actOn(kind: "cancel" | "shift" | "promote", m: Message, shiftMs: number, at: ReturnType<typeof timestampFromMs> | null): Promise<boolean> {
  if (kind === "cancel") {
    const r = await call("Cancel", () => api.cancel({ id: m.id }));
    return r.result === CancelResult.CANCELLED || r.result === CancelResult.ALREADY_CANCELLED;
  }
  const base = m.deliverAt ? timestampDate(m.deliverAt).getTime() : Date.now();
  const res = await call("Reschedule", () => api.reschedule({
    id: m.id,
    when: kind === "promote" ? { case: "now", value: true } : { case: "deliverAt", value: at ?? timestampFromMs(Math.max(0, base + shiftMs)) },
  }));
  if (res.result !== RescheduleResult.RESCHEDULED) {
    throw new Error(`${m.id}: ${enumName(RescheduleResult, res.result, "")}`);
  }
  return true;
}
