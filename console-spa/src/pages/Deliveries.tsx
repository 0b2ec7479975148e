// Notification deliveries (docs/approvals.md "When a delivery fails"): what the outbox still owes Slack, email and
// the webhook, and what it gave up, with Retry for an admin once the cause is fixed. Shown on Approvals → Settings.
import { useAction } from "../api/actions";
import { mesh } from "../api/client";
import { isoOf } from "../api/oauth";
import { useWho } from "../api/people";
import { useDeliveries } from "../api/queries";
import type { Delivery } from "../api/types";
import { Section, Time } from "../components/bits";
import { ErrorNote, Loading } from "../components/states";
import { mayWrite } from "../lib/people";
import { Link, pathSeg } from "../router";

const CHANNEL: Record<Delivery["lane"], string> = { webhook: "Webhook", slack: "Slack", email: "Email" };

export function DeliveriesSection() {
  const q = useDeliveries();
  const writes = mayWrite(useWho());
  const retry = useAction((seq: number) => mesh.post<Delivery>(`/notifications/deliveries/${seq}/retry`, {}), [["deliveries"]]);
  if (q.isPending) return <Loading what="notification deliveries" />;
  if (q.isError) return <ErrorNote error={q.error} what="notification deliveries" />;
  if (q.data.lanes.length === 0) {
    return (
      <Section title="Notification deliveries">
        <p className="muted">No notifications are configured on this server (Slack, email or the approval webhook).</p>
      </Section>
    );
  }
  const rows = q.data.deliveries;
  const failed = rows.filter((d) => d.status === "failed").length;
  return (
    <Section title="Notification deliveries">
      {rows.length === 0 ? (
        <p className="muted">Nothing owed: every Slack message, email and webhook delivery went out.</p>
      ) : (
        <>
          {failed ? (
            <p className="note note-error" role="alert">
              <strong>{failed === 1 ? "1 delivery was given up" : `${failed} deliveries were given up`}.</strong> Fix the cause (the error
              says it), then Retry: it goes out in its place. The approvals themselves still wait in the console.
            </p>
          ) : null}
          <table className="table deliveries">
            <thead>
              <tr>
                <th>Channel</th>
                <th>What</th>
                <th>Approval</th>
                <th>State</th>
                <th>Tries</th>
                <th>Last error</th>
                <th>Queued</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {rows.map((d) => (
                <tr key={d.seq} data-delivery={d.seq}>
                  <td data-label="Channel">{CHANNEL[d.lane] ?? d.lane}</td>
                  <td data-label="What" className="mono small">{d.kind}</td>
                  <td data-label="Approval" className="mono small">
                    {d.approval_id ? <Link to={`/approvals/${pathSeg(d.approval_id)}`}>{d.approval_id.slice(0, 8)}</Link> : "–"}
                  </td>
                  <td data-label="State">
                    <span className={`badge ${d.status === "failed" ? "badge-bad" : "badge-warn"}`}>{d.status === "failed" ? "given up" : "retrying"}</span>
                    {d.status === "queued" && d.next_attempt_at ? <span className="muted small"> next <Time ts={isoOf(d.next_attempt_at)} /></span> : null}
                  </td>
                  <td data-label="Tries">{d.attempts}</td>
                  <td data-label="Last error" className="small">{d.last_error || "–"}</td>
                  <td data-label="Queued"><Time ts={isoOf(d.created_at)} /></td>
                  <td>
                    {d.status === "failed" && writes ? (
                      <button type="button" className="btn btn-small" disabled={retry.isPending} onClick={() => retry.mutate(d.seq)}>
                        Retry
                      </button>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {retry.error ? <ErrorNote error={retry.error} /> : retry.data ? <p className="note note-ok" role="status">Queued again: delivery {retry.data.seq}.</p> : null}
        </>
      )}
    </Section>
  );
}
