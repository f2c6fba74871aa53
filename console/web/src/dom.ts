// A few DOM helpers: element building, notices, and the confirmation and
// form dialogs every destructive action goes through.

import { isUnimplemented } from "./api.js";

export type Child = Node | string | number | null | undefined | false | Child[];
type AttrValue = string | number | boolean | null | undefined | ((ev: any) => void);

/** h builds an element: attributes ("on…" ones become listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Record<string, AttrValue> | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = String(v);
    else if (k === "value" && "value" in el) (el as HTMLInputElement).value = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

/** fill replaces el's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** How long a notice stays, in ms: an error a little longer than a success. */
export const noticeMs = { ok: 4000, err: 8000 };

/**
 * notify shows a notice in the corner. It goes away by itself after
 * noticeMs (sooner with its ×), and when the page changes (clearNotices).
 */
export function notify(kind: "ok" | "err", text: string): void {
  const box = document.getElementById("notices");
  if (!box) return;
  const n = h("div", { class: `notice ${kind}`, role: kind === "err" ? "alert" : "status" },
    h("span", null, text),
    h("button", { class: "close", "aria-label": "close", onclick: () => n.remove() }, "×"));
  box.appendChild(n);
  setTimeout(() => n.remove(), noticeMs[kind]);
}

/** clearNotices removes every notice: what they said was about the page left. */
export function clearNotices(): void {
  document.getElementById("notices")?.replaceChildren();
}

/** failed shows an error of a call as a notice and returns it. */
export function failed(e: unknown): unknown {
  notify("err", e instanceof Error ? e.message : String(e));
  return e;
}

/** unavailable is the block shown where an RPC answers UNIMPLEMENTED or fails. */
export function unavailable(e: unknown, what: string): HTMLElement {
  if (isUnimplemented(e)) {
    return h("div", { class: "unimpl", "data-rpc": e.rpc },
      h("strong", null, `${what}: not available on this server. `),
      `${e.rpc} answers UNIMPLEMENTED (the server does not implement it yet).`);
  }
  return h("div", { class: "error" }, `${what}: ${e instanceof Error ? e.message : String(e)}`);
}

function dialog(...children: Child[]): HTMLDialogElement {
  const d = h("dialog", { class: "dialog" }, ...children);
  document.body.appendChild(d);
  d.addEventListener("close", () => d.remove());
  d.showModal();
  return d;
}

/**
 * confirm asks before a destructive action; it resolves true only on the
 * action button. The other button says what not acting means ("Keep" for
 * a cancel), so that no dialog has two buttons of one name.
 */
export function confirm(title: string, body: Child, action: string, dismiss = "Back"): Promise<boolean> {
  return new Promise((resolve) => {
    let ok = false;
    const d = dialog(
      h("h2", null, title),
      h("div", { class: "dialog-body" }, body),
      h("div", { class: "dialog-buttons" },
        h("button", { class: "dialog-cancel", type: "button", onclick: () => d.close() }, dismiss),
        h("button", { class: "dialog-ok danger", type: "button", onclick: () => { ok = true; d.close(); } }, action)),
    );
    d.addEventListener("close", () => resolve(ok));
  });
}

export interface Field {
  name: string;
  label: string;
  type?: string;
  value?: string;
  placeholder?: string;
  options?: [string, string][];
  required?: boolean;
  hint?: string;
}

/** form asks for some values; null when closed without its action. */
export function form(title: string, fields: Field[], action: string, intro?: Child): Promise<Record<string, string> | null> {
  return new Promise((resolve) => {
    let result: Record<string, string> | null = null;
    const f = h("form", { method: "dialog" },
      h("h2", null, title),
      intro ? h("div", { class: "dialog-body" }, intro) : null,
      fields.map((fd) => h("label", null, h("span", null, fd.label), field(fd), fd.hint ? h("small", null, fd.hint) : null)),
      h("div", { class: "dialog-buttons" },
        h("button", { class: "dialog-cancel", type: "button", onclick: () => d.close() }, "Close"),
        h("button", { class: "dialog-ok", type: "submit" }, action)));
    f.addEventListener("submit", () => {
      result = {};
      for (const fd of fields) result[fd.name] = (f.elements.namedItem(fd.name) as HTMLInputElement).value;
    });
    const d = dialog(f);
    d.addEventListener("close", () => resolve(result));
  });
}

/** field is the input of one Field. */
export function field(fd: Omit<Field, "label">): HTMLElement {
  if (fd.options) {
    return h("select", { name: fd.name },
      fd.options.map(([v, label]) => h("option", { value: v, selected: v === fd.value }, label)));
  }
  if (fd.type === "textarea") {
    const t = h("textarea", { name: fd.name, placeholder: fd.placeholder, rows: 4 });
    t.value = fd.value ?? "";
    return t;
  }
  return h("input", {
    name: fd.name, type: fd.type ?? "text", value: fd.value ?? "", placeholder: fd.placeholder,
    required: fd.required, step: fd.type === "datetime-local" ? "1" : undefined,
  });
}

/** table builds a table whose wrapper scrolls sideways on a narrow screen. */
export function table(head: Child[], rows: (Child[] | HTMLTableRowElement)[], attrs?: Record<string, AttrValue>): HTMLElement {
  return h("div", { class: "table-wrap" },
    h("table", attrs ?? null,
      h("thead", null, h("tr", null, head.map((c) => h("th", null, c)))),
      h("tbody", null, rows.map((r) => (Array.isArray(r) ? row(null, r) : r)))));
}

/** row builds a table row of cells. */
export function row(attrs: Record<string, AttrValue> | null, cells: Child[]): HTMLTableRowElement {
  return h("tr", attrs, cells.map((c) => h("td", null, c)));
}

/** busy disables a button while f runs. */
export async function busy<T>(btn: HTMLButtonElement | null, f: () => Promise<T>): Promise<T> {
  if (btn) btn.disabled = true;
  try {
    return await f();
  } finally {
    if (btn) btn.disabled = false;
  }
}

/** setOptions gives a select these options, rebuilding it only when they changed (an open list stays open). */
export function setOptions(sel: HTMLSelectElement, options: [string, string][], value: string): void {
  const same = sel.options.length === options.length && options.every(([v, l], i) => sel.options[i].value === v && sel.options[i].text === l);
  if (!same) fill(sel, options.map(([v, l]) => h("option", { value: v }, l)));
  sel.value = value;
}
