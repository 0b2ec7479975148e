// Small presentational pieces used across pages.
import { useEffect, useState, type ReactNode } from "react";
import { formatCountdown, parseGoDuration } from "../lib/durations";
import { decisionState } from "../lib/decisions";
import { pretty, resolverKind, timeAgo, formatTime } from "../lib/format";
import { Link } from "../router";

const ACTION_CLASS: Record<string, string> = {
  allow: "ok",
  approved: "ok",
  ok: "ok",
  running: "ok",
  connected: "ok",
  pinned: "ok",
  deny: "bad",
  denied: "bad",
  halted: "bad",
  error: "bad",
  failing: "bad",
  rate_limited: "warn",
  outcome_unknown: "warn",
  human_approval: "warn",
  pending: "warn",
  timeout: "muted",
  escalated: "warn",
  paused: "warn",
  retrying: "warn",
  new: "warn",
  changed: "bad",
  skipped: "muted",
  inherit: "muted",
};

export function Badge({ value, title }: { value: string | undefined | null; title?: string }) {
  if (!value) return null;
  const base = value.split(":")[0]!;
  const cls = ACTION_CLASS[value] ?? ACTION_CLASS[base] ?? "muted";
  return (
    <span className={`badge badge-${cls}`} title={title}>
      {value.replace(/_/g, " ")}
    </span>
  );
}

export function Time({ ts }: { ts: string | undefined | null }) {
  if (!ts) return <span className="muted">–</span>;
  return (
    <time dateTime={ts} title={formatTime(ts)}>
      {timeAgo(ts)}
    </time>
  );
}

/** Re-renders every second; the deadline is fixed when the server's `remaining` was fetched. */
export function Countdown({ remaining, fetchedAt }: { remaining: string | undefined; fetchedAt: number }) {
  const total = parseGoDuration(remaining);
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  if (total == null) return <span className="muted">–</span>;
  const left = total - (now - fetchedAt);
  return (
    <span className={`countdown ${left < 30_000 ? "countdown-urgent" : ""}`} aria-label={`${formatCountdown(left)} left`}>
      {left <= 0 ? "expiring" : formatCountdown(left)}
    </span>
  );
}

export function Resolver({ by, kind: given }: { by: string | undefined; kind?: string }) {
  if (!by) return <span className="muted">–</span>;
  const kind = given || resolverKind(by);
  return (
    <span>
      {by} <span className={`tag tag-${kind}`}>{kind}</span>
    </span>
  );
}

export function TraceLink({ id }: { id: string | undefined }) {
  if (!id) return <span className="muted">–</span>;
  return (
    <Link to="/traces" query={{ trace: id }} className="mono" title={id}>
      {id.slice(0, 8)}
    </Link>
  );
}

export function Kpi({ label, value, tone, to }: { label: string; value: ReactNode; tone?: string; to?: string }) {
  const body = (
    <>
      <span className="kpi-value">{value}</span>
      <span className="kpi-label">{label}</span>
    </>
  );
  return to ? (
    <Link to={to} className={`kpi kpi-${tone ?? "plain"}`}>
      {body}
    </Link>
  ) : (
    <div className={`kpi kpi-${tone ?? "plain"}`}>{body}</div>
  );
}

const REDACTION_KEYS = ["content_length", "content_sha256", "content_type_detected"];

export function isRedacted(v: unknown): v is { content_length: number; content_sha256: string; content_type_detected: string } {
  return !!v && typeof v === "object" && !Array.isArray(v) && REDACTION_KEYS.every((k) => k in (v as object));
}

/** Params as a key/value list; redaction markers (CONTRACT 1.8) are shown as what they are. */
export function Params({ value }: { value: unknown }) {
  if (value === null || value === undefined) return <span className="muted">no params</span>;
  if (typeof value !== "object" || Array.isArray(value)) return <pre className="code">{pretty(value)}</pre>;
  const entries = Object.entries(value as Record<string, unknown>);
  if (!entries.length) return <span className="muted">no params</span>;
  return (
    <dl className="params">
      {entries.map(([k, v]) => (
        <div key={k} className="param">
          <dt>{k}</dt>
          <dd>
            {isRedacted(v) ? (
              <span className="redacted">
                <span className="tag tag-redacted">redacted</span> {v.content_length.toLocaleString()} bytes,{" "}
                {v.content_type_detected}, sha256 <code title={v.content_sha256}>{v.content_sha256.slice(0, 16)}…</code>
              </span>
            ) : v !== null && typeof v === "object" ? (
              <Params value={v} />
            ) : (
              <pre className="code inline">{typeof v === "string" ? v : pretty(v)}</pre>
            )}
          </dd>
        </div>
      ))}
    </dl>
  );
}

export function Section({ title, actions, children, id }: { title: ReactNode; actions?: ReactNode; children: ReactNode; id?: string }) {
  return (
    <section className="card" aria-labelledby={id}>
      <header className="card-head">
        <h2 id={id}>{title}</h2>
        {actions ? <div className="card-actions">{actions}</div> : null}
      </header>
      {children}
    </section>
  );
}

/** The one badge of an approval's state: pending, approved by human / supervisor / precedent, denied, or refused
 * by timeout (red, never beside a green "allow"). `data-decision` names the state for tests and styles. */
export function DecisionBadge({ status, by, kind }: { status: string | undefined | null; by?: string | null; kind?: string | null }) {
  const s = decisionState(status, by, kind);
  if (!s) return null;
  return (
    <span className={`badge badge-${s.tone}`} title={s.title} data-decision={s.key}>
      {s.label}
    </span>
  );
}
