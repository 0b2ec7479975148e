// How the Memory page shows facts: the decision facts the mesh and the supervisor write (one per settled
// approval) are the system's, kept apart from what agents and people store; their machine tags (`at:` epoch
// milliseconds, `sig:` signatures) are shown short, the time as a time.
import type { MemoryListItem } from "./memoryText";

/** A decision fact: written by the mesh or the supervisor for a settled approval (docs/supervisor.md). */
export const isSystemFact = (m: Pick<MemoryListItem, "key" | "tags">) => m.key.startsWith("decision.") && m.tags.includes("decision");

export interface TagView {
  text: string;
  title: string;
  /** an RFC 3339 time, for tags that carry one */
  at?: string;
}

/** `at:` tags hold epoch milliseconds (or seconds); long ids and signatures are cut, the whole tag in the title. */
export function tagView(tag: string): TagView {
  const at = /^at:(\d{9,13})(?:\.\d+)?$/.exec(tag);
  if (at) {
    const n = Number(at[1]);
    const ms = at[1]!.length >= 12 ? n : n * 1000;
    return { text: "at", title: tag, at: new Date(ms).toISOString() };
  }
  const long = /^(sig|trace|approval):(.{13,})$/.exec(tag);
  if (long) return { text: `${long[1]}:${long[2]!.slice(0, 8)}…`, title: tag };
  return { text: tag, title: tag };
}
