// Connection settings live in sessionStorage: entered in the UI, gone with the tab, never part of the build.
import { useSyncExternalStore } from "react";

export interface ConnectionSettings {
  /** The mesh's base URL; empty means the page's own origin. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <adminToken>` on every mesh request when set. */
  adminToken: string;
  /** Token for the memory routes (/rpc, /memory/*); empty means "use the admin token". */
  memoryToken: string;
  /** The sup7 admin API, configured apart because it is a separate process. */
  supervisorUrl: string;
  supervisorToken: string;
}

const KEY = "flux7.console.connection";
const EMPTY: ConnectionSettings = { baseUrl: "", adminToken: "", memoryToken: "", supervisorUrl: "", supervisorToken: "" };

let current: ConnectionSettings = read();
const listeners = new Set<() => void>();

function read(): ConnectionSettings {
  try {
    const raw = globalThis.sessionStorage?.getItem(KEY);
    if (!raw) return { ...EMPTY };
    const parsed = JSON.parse(raw) as Partial<ConnectionSettings>;
    const out = { ...EMPTY };
    for (const k of Object.keys(EMPTY) as (keyof ConnectionSettings)[]) {
      const v = parsed[k];
      if (typeof v === "string") out[k] = v;
    }
    return out;
  } catch {
    return { ...EMPTY };
  }
}

export function getSettings(): ConnectionSettings {
  return current;
}

export function saveSettings(next: ConnectionSettings): void {
  current = { ...next };
  try {
    globalThis.sessionStorage?.setItem(KEY, JSON.stringify(current));
  } catch {
    // Storage can be disabled (private mode); the settings still hold for this page's life.
  }
  listeners.forEach((l) => l());
}

export function useSettings(): ConnectionSettings {
  return useSyncExternalStore(
    (cb) => {
      listeners.add(cb);
      return () => listeners.delete(cb);
    },
    () => current,
  );
}

/** The start-up line's console link carries the generated admin token in its fragment
 *  (`/console/#token=…`, never sent to the server): keep it in the settings and clear it from the address bar
 *  (and history) before the hash router reads the fragment. Returns whether a token was taken. */
export function adoptTokenFromUrl(
  loc: Pick<Location, "hash" | "pathname" | "search"> | undefined = globalThis.location,
  hist: Pick<History, "replaceState"> | undefined = globalThis.history,
): boolean {
  const match = /^#token=([^&]*)/.exec(loc?.hash ?? "");
  if (!match || !loc) return false;
  let token = "";
  try {
    token = decodeURIComponent(match[1] ?? "").trim();
  } catch {
    token = "";
  }
  hist?.replaceState(null, "", `${loc.pathname}${loc.search}#/`);
  if (!token) return false;
  saveSettings({ ...current, adminToken: token });
  return true;
}

/** The effective mesh base, without a trailing slash. */
export function meshBase(s: ConnectionSettings = current): string {
  const raw = s.baseUrl.trim() || globalThis.location?.origin || "";
  return raw.replace(/\/+$/, "");
}

export function supervisorBase(s: ConnectionSettings = current): string {
  return s.supervisorUrl.trim().replace(/\/+$/, "");
}
