// What happened to a call after the policy let it through. A trace's policy says what the mesh decided ("allow");
// the call can still fail at its upstream (HTTP 500) or on its arguments (HTTP 400), and a green "allow" alone
// would read as success.
import type { TraceEntry } from "../api/types";

export interface CallOutcome {
  key: "failed";
  label: string;
  title: string;
}

/** The call was forwarded to its tool: allowed by the policy (or a grant, or a precedent), or approved. */
export const forwarded = (t: TraceEntry) => t.policy === "allow" || t.approval_status === "approved";

/** A failure of a forwarded call (its status, and the error the mesh recorded), or null for a success, a call
 *  never forwarded (denied, halted, refused) or one whose outcome is not known yet (status 0). */
export function callOutcome(t: TraceEntry): CallOutcome | null {
  if (!forwarded(t) || !t.status_code) return null;
  if (t.status_code < 400 && !t.error) return null;
  const status = t.status_code >= 400 ? ` ${t.status_code}` : "";
  return { key: "failed", label: `failed${status}`, title: t.error || `the tool answered HTTP ${t.status_code}` };
}
