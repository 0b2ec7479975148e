import { isActiveHalt, useHalts } from "../api/queries";
import { Link } from "../router";

/** Red on every page while an emergency stop is in force (GET /halts, polled). */
export function HaltBanner() {
  const q = useHalts();
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
