import { ApiError } from "../api/client";
import { isActiveHalt, useHalts } from "../api/queries";
import { Link } from "../router";
import { getSettings } from "../settings";

/** Red on every page while an emergency stop is in force (GET /halts, polled). When the stops cannot
 *  be read, say so: a silent banner would look like "no stop". */
export function HaltBanner() {
  const q = useHalts();
  if (q.isError && q.data === undefined) {
    const refused = q.error instanceof ApiError && q.error.status === 401;
    const reason = !refused ? (q.error as Error).message : getSettings().adminToken.trim() ? "the server refused the admin token." : "not authorised (no admin token is set).";
    return (
      <div className="warn-banner" role="alert">
        <strong>Cannot check for emergency stops:</strong> {reason}{" "}
        <Link to="/settings">{refused ? "Set the admin token" : "Check the connection"}</Link>
      </div>
    );
  }
  const active = (q.data ?? []).filter(isActiveHalt);
  if (!active.length) return null;
  return (
    <div className="halt-banner" role="alert">
      <strong>Emergency stop in force.</strong>{" "}
      {active.map((h, i) => (
        <span key={h.id}>
          {i ? "; " : ""}
          {h.scope === "all" ? "all agents" : `${h.scope} ${h.target ?? ""}`}
          {h.reason ? ` — ${h.reason}` : ""}
        </span>
      ))}{" "}
      <Link to="/halts">Review or resume</Link>
    </div>
  );
}
