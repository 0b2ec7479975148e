import { ApiError } from "../api/client";
import { useApprovals, useHealth, useTraces } from "../api/queries";
import { Kpi, Section } from "../components/bits";
import { ErrorNote, Loading, QueryState } from "../components/states";
import { TraceTable } from "../components/TraceTable";
import { formatNumber } from "../lib/format";
import { Link } from "../router";
import { PendingTable } from "./Approvals";

const DENIED = new Set(["deny", "halted", "rate_limited"]);

export function OverviewPage() {
  const health = useHealth();
  const pending = useApprovals("pending");
  const traces = useTraces({ limit: 100 });
  const h = health.data;
  return (
    <>
      <h1>Overview</h1>
      {health.isPending ? (
        <Loading what="health" />
      ) : health.isError && !h ? (
        <ErrorNote error={health.error} what="/health" />
      ) : h ? (
        <div className="kpis">
          <Kpi label="calls traced" value={formatNumber(h.traces.total)} to="/traces" />
          <Kpi label="allowed" value={formatNumber(h.traces.allowed)} tone="ok" />
          <Kpi label="denied" value={formatNumber(h.traces.denied)} tone="bad" />
          <Kpi label="sent to approval" value={formatNumber(h.traces.human_approval)} tone="warn" to="/approvals?tab=history" />
          <Kpi label="errors" value={formatNumber(h.traces.errors)} tone={h.traces.errors ? "bad" : "plain"} />
          <Kpi label="tools" value={formatNumber(h.tools)} to="/tools" />
          {pending.isError && pending.data === undefined ? (
            <Kpi
              label={pending.error instanceof ApiError && pending.error.status === 401 ? "pending: cannot see (not authorised)" : "pending: cannot see"}
              value="?"
              tone="bad"
              to="/settings"
            />
          ) : (
            <Kpi label="pending now" value={pending.data ? formatNumber(pending.data.length) : "…"} tone={pending.data?.length ? "warn" : "plain"} to="/approvals" />
          )}
          <Kpi label={`status · ${h.version}`} value={h.status} tone={h.status === "ok" ? "ok" : "bad"} />
        </div>
      ) : null}
      <Section title="Pending approvals" actions={<Link to="/approvals">All approvals</Link>}>
        <QueryState query={pending} what="pending approvals" isEmpty={(d) => d.length === 0} empty="Nothing is waiting for a decision.">
          {(items) => <PendingTable items={items.slice(0, 5)} fetchedAt={pending.dataUpdatedAt} />}
        </QueryState>
      </Section>
      <div className="grid-2 grid-wide">
        <Section title="Recent activity" actions={<Link to="/traces">All traces</Link>}>
          <QueryState query={traces} what="traces" isEmpty={(d) => d.length === 0} empty="No tool call has been traced yet. Calls through /tool, /decide or /mcp appear here.">
            {(d) => <TraceTable traces={d.slice(0, 10)} caption="Recent tool calls" compact />}
          </QueryState>
        </Section>
        <Section title="Denials" actions={<Link to="/policies">Policies</Link>}>
          <QueryState query={traces} what="denials" isEmpty={(d) => !d.some((t) => DENIED.has(t.policy))} empty="No denial among the last 100 calls.">
            {(d) => <TraceTable traces={d.filter((t) => DENIED.has(t.policy)).slice(0, 10)} caption="Recent denials" compact />}
          </QueryState>
        </Section>
      </div>
    </>
  );
}
