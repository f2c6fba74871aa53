// Dead letters: a topic's dead letters with why they died; redrive (all,
// by reason, or the selected ones, at a rate) with its progress; purge.

import { api, call, isUnimplemented, MessageState, type ListResponse, type Message } from "./api.js";
import { openDetail } from "./detail.js";
import { busy, confirm, failed, fill, h, notify, row, setOptions, table, unavailable } from "./dom.js";
import { num, shortId, when } from "./format.js";
import { dlqSuffix, go, loadTopics, replaceRoute, type Page } from "./page.js";

const reasons = ["max-attempts", "nacked", "sink"];

export function deadLettersPage(params: URLSearchParams): Page {
  const topic = params.get("topic") ?? "";
  const reason = reasons.includes(params.get("reason") ?? "") ? params.get("reason")! : "";
  const select = h("select", { id: "dlq-topic", onchange: () => go("deadletters", { topic: select.value }) });
  const reasonSel = h("select", { id: "dlq-reason", onchange: () => go("deadletters", reasonSel.value ? { topic, reason: reasonSel.value } : { topic }) },
    h("option", { value: "" }, "any reason"), reasons.map((r) => h("option", { value: r, selected: r === reason }, r)));
  const counts = h("p", { id: "dlq-count", class: "muted" });
  const listEl = h("div", { id: "dlq-list" }, "Loading…");
  const detail = h("section", { id: "detail", class: "card wide", hidden: true });

  const toIn = h("input", { id: "redrive-to", placeholder: "the topic each died on" });
  const rateIn = h("input", { id: "redrive-rate", type: "number", min: 1, max: 100000, value: "100" });
  const scope = h("select", { id: "redrive-scope" },
    h("option", { value: "all" }, "all dead letters (of the reason chosen above)"),
    h("option", { value: "selected" }, "the selected ones"));
  const bar = h("progress", { id: "redrive-bar", max: 1, value: 0, hidden: true });
  const progress = h("span", { id: "redrive-progress", class: "muted" });
  let stop = false;
  const stopBtn = h("button", { type: "button", class: "small", hidden: true, onclick: () => { stop = true; } }, "Stop");
  const redriveBtn = h("button", { type: "button", id: "redrive-go", "data-verb": "manage", onclick: () => redrive() }, "Redrive");
  const purgeBtn = h("button", { type: "button", id: "dlq-purge", class: "danger", "data-verb": "manage", onclick: () => purge() }, "Purge all");
  const selected = new Set<string>();

  const el = h("div", { class: "page deadletters" },
    h("section", { class: "card wide" },
      h("div", { class: "toolbar" },
        h("label", null, h("span", null, "Topic"), select),
        h("label", null, h("span", null, "Reason"), reasonSel)),
      counts),
    topic ? h("section", { class: "card wide" }, h("h2", null, "Redrive"),
      h("div", { class: "toolbar" },
        h("label", null, h("span", null, "Move"), scope),
        h("label", null, h("span", null, "To topic"), toIn),
        h("label", null, h("span", null, "Per second"), rateIn),
        redriveBtn, stopBtn, purgeBtn),
      h("div", { class: "progress" }, bar, progress)) : null,
    detail,
    h("section", { class: "card wide" }, listEl));

  let total = -1;
  let shown: Message[] = [];

  async function refresh(): Promise<void> {
    const tp = await loadTopics();
    const withDead = new Map<string, number>();
    for (const t of tp.infos ?? []) if (t.deadLettered > 0n) withDead.set(t.topic, Number(t.deadLettered));
    if (!tp.infos) for (const t of tp.stats.topics) if (t.topic.endsWith(dlqSuffix)) withDead.set(t.topic.slice(0, -dlqSuffix.length), Number(t.ready));
    const names = [...new Set([...tp.names, ...withDead.keys()])].sort();
    if (!topic && names.length) {
      // No topic asked for: the first with dead letters, else the first.
      replaceRoute("deadletters", { topic: [...withDead.keys()].sort()[0] ?? names[0] });
      return;
    }
    const shownNames = topic && !names.includes(topic) ? [...names, topic] : names;
    setOptions(select, shownNames.length
      ? shownNames.map((n): [string, string] => [n, withDead.has(n) ? `${n} (${num(withDead.get(n)!)})` : n])
      : [["", "no topics yet"]], topic);
    if (!topic) return void fill(listEl, h("p", { class: "empty" }, "No topics yet: schedule a message to create one."));
    total = withDead.get(topic) ?? 0;
    counts.textContent = `${num(total)} dead letters in ${topic}${dlqSuffix}`;
    let res: ListResponse;
    try {
      res = await call("List", () => api.list({ topic, state: MessageState.DEAD_LETTERED, pageSize: 1000 }));
    } catch (e) {
      fill(listEl, unavailable(e, "Listing dead letters"));
      return;
    }
    shown = res.messages.filter((m) => !reason || m.deadLetter?.reason === reason);
    const now = Date.now();
    fill(listEl, shown.length
      ? [table(["", "ID", "Reason", "Last error", "Attempts", "Died", "On topic"], shown.map((m) => {
        const cb = h("input", { type: "checkbox", class: "sel", "aria-label": `select ${m.id}` });
        cb.checked = selected.has(m.id);
        cb.addEventListener("change", () => (cb.checked ? selected.add(m.id) : selected.delete(m.id)));
        const d = m.deadLetter;
        return row({ "data-id": m.id }, [
          cb,
          h("a", { href: "#", class: "open", onclick: (ev: Event) => { ev.preventDefault(); openDetail(detail, { id: m.id }, () => void refresh()); } }, shortId(m.id)),
          d?.reason ?? "—", d?.lastError ?? "", String(d?.attempts ?? m.attempt), when(d?.at, now), d?.originTopic ?? topic,
        ]);
      }), { id: "dlq-table" }),
      res.nextPageToken && res.messages.length ? h("p", { class: "muted" }, `The first ${num(res.messages.length)} are listed.`) : null]
      : h("p", { class: "empty" }, `No dead letters${reason ? ` of reason ${reason}` : ""} in ${topic}.`));
  }

  async function redrive(): Promise<void> {
    const ratePerSecond = Math.max(1, Math.min(100000, Math.round(Number(rateIn.value) || 100)));
    const ids = scope.value === "selected" ? [...selected] : [];
    if (scope.value === "selected" && ids.length === 0) return void notify("err", "Select dead letters first, or redrive all.");
    const to = toIn.value.trim();
    const what = ids.length ? `${num(ids.length)} selected dead letters` : `every dead letter${reason ? ` of reason ${reason}` : ""} of ${topic}`;
    if (!(await confirm(`Redrive ${what}?`, `They go back to ${to || "the topic each died on"} as new first attempts, at most ${num(ratePerSecond)} a second.`, "Redrive"))) return;
    stop = false;
    stopBtn.hidden = false;
    bar.hidden = false;
    const goal = ids.length || (reason ? shown.length : total) || 1;
    bar.max = goal;
    bar.value = 0;
    let moved = 0;
    let skipped = 0n;
    await busy(redriveBtn, async () => {
      try {
        for (;;) {
          const res = await call("Redrive", () => api.redrive({
            deadLetterTopic: topic + dlqSuffix, toTopic: to, reason, ids, ratePerSecond, maxMessages: ratePerSecond,
          }));
          moved += Number(res.redriven);
          skipped = res.skipped;
          bar.value = Math.min(goal, moved);
          progress.textContent = `${num(moved)} of ${num(goal)} redriven${skipped > 0n ? `, ${num(skipped)} left by the filter` : ""}`;
          if (!res.more || stop || res.redriven === 0n) break;
        }
        notify("ok", `Redrive of ${topic}: ${num(moved)} moved${stop ? " (stopped)" : ""}`);
      } catch (e) {
        failed(e);
        progress.textContent = isUnimplemented(e) ? e.message : `${num(moved)} redriven, then: ${(e as Error).message}`;
      }
    });
    stopBtn.hidden = true;
    selected.clear();
    await refresh();
  }

  async function purge(): Promise<void> {
    if (!(await confirm(`Purge every dead letter of ${topic}?`, `All ${num(total)} messages in ${topic}${dlqSuffix} are removed for good, whatever the reason filter.`, "Purge"))) return;
    await busy(purgeBtn, async () => {
      try {
        const res = await call("Purge", () => api.purge({ topic, state: MessageState.DEAD_LETTERED }));
        notify("ok", `Purged ${num(res.purged)} dead letters of ${topic}`);
        await refresh();
      } catch (e) {
        failed(e);
      }
    });
  }

  return { el, refresh, every: 5000 };
}
