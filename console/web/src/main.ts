// The console's shell: the login screen, the navigation between pages
// (the URL's hash: #/timeline?topic=orders), and the live refresh of the
// page shown.

import "./style.css";
import { api, call, codeName, hasToken, RpcError, setToken, whenUnauthenticated, type WhoAmIResponse } from "./api.js";
import { auditPage } from "./audit.js";
import { clearNotices, fill, h } from "./dom.js";
import { time } from "./format.js";
import { calendarsPage } from "./calendars.js";
import { deadLettersPage } from "./deadletters.js";
import { messagesPage } from "./messages.js";
import { overviewPage } from "./overview.js";
import { schedulesPage } from "./schedules.js";
import { timelinePage } from "./timeline.js";
import type { Page } from "./page.js";

const pages: Record<string, { title: string; make: (p: URLSearchParams) => Page }> = {
  overview: { title: "Overview", make: overviewPage },
  timeline: { title: "Timeline", make: timelinePage },
  messages: { title: "Messages", make: messagesPage },
  deadletters: { title: "Dead letters", make: deadLettersPage },
  schedules: { title: "Schedules", make: schedulesPage },
  calendars: { title: "Calendars", make: calendarsPage },
  audit: { title: "Audit", make: auditPage },
};

/** verbs are those a credential may have; the body's may-<verb> classes show the actions of those it has. */
const verbs = ["produce", "consume", "cancel", "read", "manage", "schedule", "audit"];

let current: Page | null = null;
let timer: number | undefined;
let live = true;
let loggedIn = false;

const main = h("main", { id: "main" });
const status = h("span", { id: "live-status", class: "live" });
const liveBtn = h("button", { id: "live-toggle", class: "small", type: "button", onclick: () => setLive(!live) }, "Pause updates");
const logout = h("button", {
  id: "logout", class: "small", type: "button", hidden: true,
  onclick: () => { setToken(""); setIdentity(null); showLogin("Logged out."); },
}, "Log out");
const nav = h("nav", { id: "nav" },
  Object.entries(pages).map(([k, p]) => h("a", { href: `#/${k}`, "data-page": k, "data-verb": k === "audit" ? "audit" : null }, p.title)));
const whoami = h("span", { id: "whoami" });

/** setIdentity shows who is logged in and lets the page show what they may do. */
function setIdentity(id: WhoAmIResponse | null): void {
  for (const v of verbs) document.body.classList.toggle(`may-${v}`, id?.verbs.includes(v) ?? false);
  whoami.textContent = id ? `${id.name} (${id.role || id.verbs.join(", ")})` : "";
  whoami.title = id ? `verbs: ${id.verbs.join(", ")}; topics: ${id.topics.join(", ")}; by ${id.method}` : "";
}

function route(): { name: string; params: URLSearchParams } {
  const m = /^#\/([a-z]*)(?:\?(.*))?$/.exec(location.hash);
  const name = m && pages[m[1]] ? m[1] : "overview";
  return { name, params: new URLSearchParams(m?.[2] ?? "") };
}

function show(): void {
  if (!loggedIn) return;
  const { name, params } = route();
  current?.dispose?.();
  clearTimeout(timer);
  clearNotices();
  current = pages[name].make(params);
  document.title = `${pages[name].title} · Hourglass`;
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", a.dataset.page === name);
  fill(main, current.el);
  status.textContent = "loading…";
  tick(current);
}

async function tick(page: Page): Promise<void> {
  try {
    await page.refresh();
    if (page === current) status.textContent = `updated ${time(new Date()).slice(11, 19)}`;
  } catch (e) {
    if (page === current) status.textContent = e instanceof Error ? e.message : String(e);
  }
  if (page !== current || !live) return;
  timer = window.setTimeout(() => {
    if (document.hidden) document.addEventListener("visibilitychange", () => tick(page), { once: true });
    else tick(page);
  }, page.every ?? 2000);
}

function setLive(on: boolean): void {
  live = on;
  liveBtn.textContent = on ? "Pause updates" : "Resume updates";
  status.classList.toggle("paused", !on);
  clearTimeout(timer);
  if (on && current) tick(current);
  else status.textContent = "updates paused";
}

function showApp(): void {
  loggedIn = true;
  logout.hidden = !hasToken();
  document.body.classList.remove("locked");
  show();
}

/** showLogin hides everything the API showed and asks for the token. */
function showLogin(why: string): void {
  loggedIn = false;
  current?.dispose?.();
  current = null;
  clearTimeout(timer);
  document.body.classList.add("locked");
  for (const d of document.querySelectorAll("dialog")) d.remove();
  const input = h("input", { id: "token", type: "password", autocomplete: "current-password", required: true, placeholder: "token" });
  const err = h("p", { id: "login-error", class: "error", hidden: !why }, why);
  const f = h("form", { id: "login", class: "card login" },
    h("h1", null, "Hourglass console"),
    h("p", null, "This server needs a bearer token (its --auth-token, or one of its credentials) for every call. It is kept in this tab only."),
    h("label", null, h("span", null, "Token"), input),
    err,
    h("button", { id: "login-submit", type: "submit" }, "Log in"));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    err.hidden = true;
    if (await probe()) showApp();
  });
  fill(main, f);
  input.focus();
}

/** probe asks WhoAmI (any credential may) whether the page may show anything, and what. */
async function probe(): Promise<boolean> {
  try {
    setIdentity(await call("WhoAmI", () => api.whoAmI({})));
    return true;
  } catch (e) {
    if (e instanceof RpcError && codeName(e.code) === "UNAUTHENTICATED") return false;
    // A server without WhoAmI: show every action, as before.
    if (e instanceof RpcError && e.unimplemented) for (const v of verbs) document.body.classList.add(`may-${v}`);
    // Another failure (the server stopping, say) is shown by the pages.
    return true;
  }
}

whenUnauthenticated((why) => {
  if (loggedIn || !document.getElementById("login")) {
    showLogin(hasToken() ? `The server refused the token: ${why}` : "");
  } else {
    const err = document.getElementById("login-error");
    if (err) {
      err.textContent = hasToken() ? `The server refused the token: ${why}` : why;
      err.hidden = false;
    }
  }
});

document.body.append(
  h("header", { class: "top" },
    h("a", { class: "brand", href: "#/overview" }, "Hourglass"),
    nav,
    h("div", { class: "right" }, whoami, status, liveBtn, logout)),
  h("div", { id: "notices" }),
  main,
);
window.addEventListener("hashchange", show);
probe().then((ok) => (ok ? showApp() : undefined));
