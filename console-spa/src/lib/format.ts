// Small display helpers shared by the pages.

export function shortId(id: string | undefined | null, n = 8): string {
  return id ? id.slice(0, n) : "";
}

export function formatTime(ts: string | undefined | null): string {
  if (!ts) return "";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

/** "12s ago", "3m ago", "2h ago", "4d ago"; a time still to come reads "in 14m" (an expiry, a deadline). `now` is
 * injectable for tests. */
export function timeAgo(ts: string | undefined | null, now: number = Date.now()): string {
  if (!ts) return "";
  const t = new Date(ts).getTime();
  if (Number.isNaN(t)) return ts;
  const s = Math.round((now - t) / 1000);
  return s < 0 ? `in ${span(-s)}` : `${span(s)} ago`;
}

function span(s: number): string {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function formatNumber(n: number | undefined | null): string {
  return n == null ? "–" : n.toLocaleString();
}

export function pretty(value: unknown): string {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** Who resolved an approval, as CONTRACT 1.13 classifies `resolved_by` (shared/decisions/facts.py resolver_kind),
 * with the timeout told apart from the other system resolutions (an emergency stop). */
export type ResolverKind = "timeout" | "system" | "mem7" | "supervisor" | "human" | "";

export function resolverKind(resolvedBy: string | undefined | null): ResolverKind {
  const who = (resolvedBy ?? "").trim().toLowerCase();
  if (!who) return "";
  if (who === "system:timeout") return "timeout";
  if (who.startsWith("system:")) return "system";
  if (who === "supervisor:mem7") return "mem7";
  if (/^(supervisor:|auto:|bot:|mcp:)/.test(who)) return "supervisor";
  return "human";
}
