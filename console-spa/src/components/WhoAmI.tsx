// The header's account of who the console acts as, with Log out; "Log in" when nobody is.
import { useState } from "react";
import { logout, useLoginState, useSignedInOrOut } from "../api/people";
import { navigate, SignInLink } from "../router";

export function WhoAmI() {
  const q = useLoginState();
  const refresh = useSignedInOrOut();
  const [busy, setBusy] = useState(false);
  const who = q.data?.who;
  if (!q.data) return null;
  if (!who) {
    return (
      <SignInLink className="who who-none">Log in</SignInLink>
    );
  }
  const session = who.kind === "user";
  return (
    <span className="who" data-actor={who.actor}>
      <span className="who-id">
        <span className="who-name" title={who.actor}>
          {who.kind === "owner" ? "admin token" : who.name}
        </span>{" "}
        <span className="tag tag-role" data-role={who.role}>
          {who.role}
        </span>
      </span>
      {session ? (
        <button
          type="button"
          className="ghost"
          disabled={busy}
          onClick={() => {
            setBusy(true);
            void logout()
              .catch(() => undefined)
              .finally(() => {
                setBusy(false);
                void refresh();
                navigate("/login");
              });
          }}
        >
          Log out
        </button>
      ) : null}
    </span>
  );
}
