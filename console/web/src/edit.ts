// Edit: replace a pending message's body and/or its own headers from its
// detail, keeping its time (the Edit RPC).

import { api, call, EditResult, type Message } from "./api.js";
import { busy, failed, form, notify } from "./dom.js";
import { bodyText, userHeaders } from "./format.js";
import { enumName } from "./detail.js";

/** editable is the body as text when the page can show all of it (not binary, not cut), else null. */
function editable(m: Message): string | null {
  const t = bodyText(m.body);
  return t !== null && new TextEncoder().encode(t).length === m.body.length ? t : null;
}

/** headerLines are a message's own headers as "key=value" lines. */
function headerLines(m: Message): string {
  return userHeaders(m.headers).map((x) => `${x.key}=${x.value}`).join("\n");
}

/** parseHeaders reads "key=value" lines (blank lines skipped); a string is the error. */
function parseHeaders(text: string): { key: string; value: string }[] | string {
  const out: { key: string; value: string }[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (!line.trim()) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) return `headers line ${i + 1} "${line}": write key=value`;
    out.push({ key: line.slice(0, eq).trim(), value: line.slice(eq + 1) });
  }
  return out;
}

/** editOne asks for a new body and headers of m and edits it; done(id) gets the ID that carries it now. */
export async function editOne(m: Message, btn: HTMLButtonElement, done: (id: string) => void): Promise<void> {
  const body = editable(m);
  const headers = headerLines(m);
  const v = await form(`Edit ${m.id}`, [
    body === null
      ? { name: "body", label: "Body", type: "textarea", value: "", placeholder: "(binary or too long to edit here: left as it is unless you write a new one)" }
      : { name: "body", label: "Body", type: "textarea", value: body },
    { name: "headers", label: "Headers (key=value, one a line)", type: "textarea", value: headers, hint: "The server's own hourglass-* headers are kept." },
  ], "Save");
  if (!v) return;
  const newBody = body === null ? (v.body === "" ? undefined : v.body) : (v.body === body ? undefined : v.body);
  const hs = v.headers === headers ? undefined : parseHeaders(v.headers);
  if (typeof hs === "string") {
    notify("err", hs);
    return;
  }
  if (newBody === undefined && hs === undefined) {
    notify("ok", "Nothing changed.");
    return;
  }
  await busy(btn, async () => {
    try {
      const res = await call("Edit", () => api.edit({
        id: m.id,
        body: newBody === undefined ? undefined : new TextEncoder().encode(newBody),
        headers: hs ?? [],
        setHeaders: hs !== undefined,
      }));
      if (res.result === EditResult.EDITED) {
        notify("ok", `Edited: now ${res.id}, at the same time`);
        done(res.id);
      } else {
        notify("err", `Edit ${m.id}: ${enumName(EditResult, res.result, "EDIT_RESULT_")}`);
      }
    } catch (e) {
      failed(e);
    }
  });
}
