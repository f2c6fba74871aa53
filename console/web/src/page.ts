// What every page is, and what several pages share: the list of topics.

import { api, call, type StatsResponse, type TopicInfo } from "./api.js";

/** Page is one page of the console. */
export interface Page {
  el: HTMLElement;
  /** refresh loads what the page shows; the shell calls it again every `every` ms while live. */
  refresh(): Promise<void>;
  every?: number;
  dispose?(): void;
}

/** go shows a page: go("messages", {topic: "orders"}). */
export function go(page: string, params: Record<string, string> = {}): void {
  const q = new URLSearchParams(params).toString();
  location.hash = `#/${page}${q ? `?${q}` : ""}`;
}

/** replaceRoute shows a page in place of this one, leaving no history entry (a default filled in). */
export function replaceRoute(page: string, params: Record<string, string>): void {
  const q = new URLSearchParams(params).toString();
  location.replace(`#/${page}${q ? `?${q}` : ""}`);
}

export interface Topics {
  /** Topics' answer, or null when it failed (topicsErr says why). */
  infos: TopicInfo[] | null;
  topicsErr: unknown;
  /** Stats' answer (its topics are the queue's, with counters). */
  stats: StatsResponse;
  /** Every topic name either knows, dead-letter topics ("<t>.dlq") left out, sorted. */
  names: string[];
}

export const dlqSuffix = ".dlq";

/** loadTopics asks Topics and Stats; Topics may fail (UNIMPLEMENTED) and Stats then stands in. */
export async function loadTopics(): Promise<Topics> {
  const [ti, st] = await Promise.allSettled([
    call("Topics", () => api.topics({})),
    call("Stats", () => api.stats({})),
  ]);
  if (st.status === "rejected") throw st.reason;
  const infos = ti.status === "fulfilled" ? ti.value.topics : null;
  const names = new Set<string>();
  for (const t of infos ?? []) names.add(t.topic);
  for (const t of st.value.topics) names.add(t.topic.endsWith(dlqSuffix) ? t.topic.slice(0, -dlqSuffix.length) : t.topic);
  return {
    infos,
    topicsErr: ti.status === "rejected" ? ti.reason : null,
    stats: st.value,
    names: [...names].filter((n) => !n.endsWith(dlqSuffix)).sort(),
  };
}
