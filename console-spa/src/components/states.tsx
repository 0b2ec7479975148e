// Loading, error and empty states that say what to do next.
import type { UseQueryResult } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { ApiError } from "../api/client";
import { MemoryError } from "../api/memory";
import { Link, SignInLink } from "../router";
import { getSettings } from "../settings";

export function ErrorNote({ error, what }: { error: unknown; what?: string }) {
  if (error instanceof ApiError) {
    if (error.status === 401) {
      const none = error.realm === "mesh" && !getSettings().adminToken.trim();
      const who = none
        ? "Not authorised: no admin token is set."
        : error.realm === "supervisor"
          ? "The supervisor refused its admin token."
          : error.realm === "memory"
            ? "The server refused the memory token (or the admin token, when no memory token is set)."
            : "The server refused the admin token.";
      return (
        <div className="note note-error load-error" role="alert">
          <strong>{who}</strong> Open the console link the server printed at start-up, or enter its admin token
          (flux7-admin.token beside its database, or the one configured) in <Link to="/settings">Settings</Link>
          {none ? <>, or <SignInLink>sign in</SignInLink></> : null}.
        </div>
      );
    }
    if (error.status === 0) {
      return (
        <div className="note note-error load-error" role="alert">
          <strong>{error.message}</strong> Check that the server is running and that the base URL in{" "}
          <Link to="/settings">Settings</Link> is right (cross-origin use also needs the server's{" "}
          <code>console.allowed_origins</code>).
        </div>
      );
    }
    if (error.status === 404 && (typeof error.body === "string" || error.body === null)) {
      return (
        <div className="note note-error load-error" role="alert">
          <strong>{error.path || "This endpoint"} is not served here (404).</strong> The server may be an older build
          or run without this role.
        </div>
      );
    }
    return (
      <div className="note note-error load-error" role="alert">
        <strong>{what ? `Could not load ${what}: ` : ""}</strong>
        {error.message} <span className="muted">(HTTP {error.status})</span>
      </div>
    );
  }
  if (error instanceof MemoryError) {
    return (
      <div className="note note-error load-error" role="alert">
        <strong>Memory said:</strong> {error.message}
      </div>
    );
  }
  return (
    <div className="note note-error load-error" role="alert">
      {what ? `Could not load ${what}: ` : ""}
      {(error as Error)?.message ?? String(error)}
    </div>
  );
}

export function Loading({ what }: { what?: string }) {
  return (
    <p className="muted" role="status" aria-live="polite">
      Loading{what ? ` ${what}` : ""}…
    </p>
  );
}

export function Empty({ children }: { children: ReactNode }) {
  return <div className="note note-empty">{children}</div>;
}

interface QueryStateProps<T> {
  query: UseQueryResult<T>;
  what: string;
  isEmpty?: (data: T) => boolean;
  empty?: ReactNode;
  children: (data: T) => ReactNode;
}

/** Renders data once loaded; keeps stale data visible with a small warning when a later poll fails. */
export function QueryState<T>({ query, what, isEmpty, empty, children }: QueryStateProps<T>) {
  if (query.isPending) return <Loading what={what} />;
  if (query.isError && query.data === undefined) return <ErrorNote error={query.error} what={what} />;
  const data = query.data as T;
  return (
    <>
      {query.isError ? (
        <p className="muted small" role="status">
          Showing the last good data; the latest refresh failed: {(query.error as Error).message}
        </p>
      ) : null}
      {isEmpty && isEmpty(data) ? <Empty>{empty ?? `No ${what} yet.`}</Empty> : children(data)}
    </>
  );
}
