// A tiny hash router: `#/path?query`. Hash routing needs no server rewrites, so dist works under /console/.
import { useSyncExternalStore, type AnchorHTMLAttributes, type ReactNode } from "react";

export interface Location {
  path: string;
  query: URLSearchParams;
}

export function parseHash(hash: string): Location {
  let h = hash.startsWith("#") ? hash.slice(1) : hash;
  if (!h.startsWith("/")) h = "/" + h;
  const q = h.indexOf("?");
  const path = q < 0 ? h : h.slice(0, q);
  return { path: path.length > 1 ? path.replace(/\/+$/, "") : path, query: new URLSearchParams(q < 0 ? "" : h.slice(q + 1)) };
}

const listeners = new Set<() => void>();

function subscribe(cb: () => void): () => void {
  listeners.add(cb);
  window.addEventListener("hashchange", cb);
  return () => {
    listeners.delete(cb);
    window.removeEventListener("hashchange", cb);
  };
}

export function useLocation(): Location {
  const hash = useSyncExternalStore(subscribe, () => window.location.hash);
  return parseHash(hash);
}

/** Builds `#/path?query`, dropping empty query values. */
export function href(path: string, query?: Record<string, string | undefined | null>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v) params.set(k, v);
  const s = params.toString();
  return `#${path}${s ? `?${s}` : ""}`;
}

export function navigate(path: string, query?: Record<string, string | undefined | null>): void {
  window.location.hash = href(path, query).slice(1);
  // The browser's hashchange comes a task later. Told now, the page renders the new location within this event:
  // a checkbox that navigates shows its new state at once, where React would first put it back as it was.
  for (const cb of [...listeners]) cb();
}

/** Matches "/agents/:id" style patterns; returns decoded params or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const ps = pattern.split("/");
  const xs = path.split("/");
  if (ps.length !== xs.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < ps.length; i++) {
    const p = ps[i]!;
    const x = xs[i]!;
    if (p.startsWith(":")) {
      if (!x) return null;
      try {
        out[p.slice(1)] = decodeURIComponent(x);
      } catch {
        out[p.slice(1)] = x;
      }
    } else if (p !== x) return null;
  }
  return out;
}

type LinkProps = Omit<AnchorHTMLAttributes<HTMLAnchorElement>, "href"> & {
  to: string;
  query?: Record<string, string | undefined | null>;
  children: ReactNode;
};

export function Link({ to, query, children, ...rest }: LinkProps) {
  return (
    <a href={href(to, query)} {...rest}>
      {children}
    </a>
  );
}

/** Encodes one path segment of a hash route. */
export const pathSeg = (s: string) => encodeURIComponent(s);

/** The route now shown (`/path?query`), for a sign-in to come back to. */
export function currentRoute(): string {
  const h = window.location.hash.replace(/^#/, "");
  return h.startsWith("/") ? h : "/";
}

/** A route to come back to after signing in: a path of this console (`/…`), never the sign-in page itself, never
 * anything a browser could read as another origin (`//host`, `/\host`) or that carries control characters. The
 * server checks the same for single sign-on (functions/login.py). */
export function safeReturn(next: string | null | undefined): string | null {
  if (!next || next.length > 2000 || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return null;
  if (/[\u0000-\u001f\u007f]/.test(next)) return null;
  const path = parseHash(next).path;
  return path === "/login" ? null : next;
}

/** Goes to a route produced by currentRoute() or safeReturn(). */
export function navigateTo(route: string): void {
  window.location.hash = route;
  for (const cb of [...listeners]) cb();
}

/** The sign-in page, coming back to the route now shown. */
export function SignInLink({ children, className }: { children: ReactNode; className?: string }) {
  const next = safeReturn(currentRoute());
  return (
    <Link to="/login" query={{ next }} className={className}>
      {children}
    </Link>
  );
}
