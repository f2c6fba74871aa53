// Audit: the audit trail, newest first, a page at a time: who changed
// what, when, and the result.

import { api, call, type AuditEntry } from "./api.js";
import { fill, h, table, unavailable } from "./dom.js";
import { time, toDate } from "./format.js";
import type { Page } from "./page.js";

export function auditPage(): Page {
  let before = 0n;
  let next = 0n;
  const list = h("div", { id: "audit-list" }, "Loading…");
  const nextBtn = h("button", { type: "button", class: "small", id: "audit-next", disabled: true, onclick: () => { before = next; void refresh(); } }, "Older");
  const firstBtn = h("button", { type: "button", class: "small", onclick: () => { before = 0n; void refresh(); } }, "Newest");
  const el = h("section", { class: "card" },
    h("h2", null, "Audit trail"),
    h("p", { class: "muted" }, "Every change an operator made: cancels, reschedules, purges, redrives, deleted topics, policies, recurring schedules, credentials reloads."),
    list,
    h("div", { class: "toolbar" }, firstBtn, nextBtn));

  async function refresh(): Promise<void> {
    try {
      const res = await call("ListAudit", () => api.listAudit({ limit: 50, beforeSeq: before }));
      next = res.nextBeforeSeq;
      nextBtn.disabled = next === 0n;
      fill(list, res.entries.length === 0 ? h("p", { class: "empty" }, "No changes recorded.") :
        table(["#", "at", "who", "action", "target", "result"], res.entries.map((e: AuditEntry) => [
          String(e.seq),
          time(toDate(e.at) ?? new Date(0)),
          e.who,
          e.action,
          e.target,
          h("span", { class: e.result === "OK" ? "ok" : "bad", title: e.request }, e.error ? `${e.result}: ${e.error}` : e.result),
        ]), { id: "audit-table" }));
    } catch (e) {
      fill(list, unavailable(e, "the audit trail"));
    }
  }
  return { el, refresh, every: 5000 };
}
