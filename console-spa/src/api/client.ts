// One fetch path for every endpoint: base URL and bearer token from the settings, typed errors out.
import { getSettings, meshBase, supervisorBase } from "../settings";

export type Realm = "mesh" | "memory" | "supervisor";

export class ApiError extends Error {
  constructor(
    readonly realm: Realm,
    readonly status: number,
    message: string,
    readonly body: unknown = null,
    readonly path = "",
  ) {
    super(message);
    this.name = "ApiError";
  }
  get unauthorized(): boolean {
    return this.status === 401;
  }
}

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface RequestOptions {
  method?: string;
  query?: Query;
  body?: unknown;
  signal?: AbortSignal;
}

export function buildQuery(query: Query | undefined): string {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null || v === "") continue;
    params.set(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}

function target(realm: Realm): { base: string; token: string } {
  const s = getSettings();
  if (realm === "supervisor") return { base: supervisorBase(s), token: s.supervisorToken.trim() };
  if (realm === "memory") return { base: meshBase(s), token: (s.memoryToken || s.adminToken).trim() };
  return { base: meshBase(s), token: s.adminToken.trim() };
}

/** Error text from a body: the mesh's `{error}`, mem7's plain text, or the status line. */
export function errorMessage(status: number, body: unknown): string {
  if (body && typeof body === "object" && "error" in body) {
    const e = (body as { error: unknown }).error;
    if (typeof e === "string" && e) return e;
  }
  if (typeof body === "string" && body.trim()) return body.trim().slice(0, 300);
  return `HTTP ${status}`;
}

export async function request<T>(realm: Realm, path: string, opts: RequestOptions = {}): Promise<T> {
  const { base, token } = target(realm);
  if (realm === "supervisor" && !base) {
    throw new ApiError(realm, 0, "The supervisor URL is not set.", null, path);
  }
  const headers: Record<string, string> = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  let payload: string | undefined;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(opts.body);
  }
  let res: Response;
  try {
    res = await fetch(`${base}${path}${buildQuery(opts.query)}`, {
      method: opts.method ?? (opts.body === undefined ? "GET" : "POST"),
      headers,
      body: payload,
      signal: opts.signal,
    });
  } catch (e) {
    if (e instanceof DOMException && e.name === "AbortError") throw e;
    throw new ApiError(realm, 0, `Cannot reach ${base || "the server"}: ${(e as Error).message}`, null, path);
  }
  const text = await res.text();
  let body: unknown = text;
  if (text && (res.headers.get("content-type") ?? "").includes("json")) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  if (!res.ok) throw new ApiError(realm, res.status, errorMessage(res.status, body), body, path);
  return body as T;
}

export const mesh = {
  get: <T>(path: string, query?: Query, signal?: AbortSignal) => request<T>("mesh", path, { query, signal }),
  post: <T>(path: string, body: unknown = {}) => request<T>("mesh", path, { method: "POST", body }),
  put: <T>(path: string, body: unknown) => request<T>("mesh", path, { method: "PUT", body }),
  del: <T>(path: string) => request<T>("mesh", path, { method: "DELETE" }),
};

export const supervisor = {
  get: <T>(path: string, query?: Query, signal?: AbortSignal) => request<T>("supervisor", path, { query, signal }),
  post: <T>(path: string, body: unknown = {}) => request<T>("supervisor", path, { method: "POST", body }),
};

/** Path segment escaping for ids, agent names and tool names. */
export const seg = (s: string) => encodeURIComponent(s);
