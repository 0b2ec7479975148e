// Test harness: a real HTTP server on loopback (no mocked fetch) and a fresh QueryClient per render.
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { render } from "@testing-library/react";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { ReactNode } from "react";
import { saveSettings } from "../settings";

export interface Recorded {
  method: string;
  path: string;
  authorization: string;
  body: unknown;
}

export type Route = (req: { method: string; path: string; query: URLSearchParams; body: unknown }) => { status: number; body: unknown; type?: string } | undefined;

export interface TestServer {
  url: string;
  requests: Recorded[];
  close: () => Promise<void>;
}

export async function serve(route: Route): Promise<TestServer> {
  const requests: Recorded[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://x");
      const text = Buffer.concat(chunks).toString("utf8");
      let body: unknown = text;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = text;
      }
      requests.push({ method: req.method ?? "", path: url.pathname, authorization: req.headers.authorization ?? "", body });
      const out = route({ method: req.method ?? "", path: url.pathname, query: url.searchParams, body });
      const headers = { "Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "*", "Access-Control-Allow-Methods": "*" };
      if (req.method === "OPTIONS") {
        res.writeHead(204, headers);
        res.end();
        return;
      }
      if (!out) {
        res.writeHead(404, { ...headers, "Content-Type": "text/plain" });
        res.end("404 page not found\n");
        return;
      }
      const type = out.type ?? "application/json";
      res.writeHead(out.status, { ...headers, "Content-Type": type });
      res.end(type.includes("json") ? JSON.stringify(out.body) : String(out.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export function connect(baseUrl: string, adminToken = "", extra: { supervisorUrl?: string; supervisorToken?: string } = {}) {
  saveSettings({ baseUrl, adminToken, memoryToken: "", supervisorUrl: extra.supervisorUrl ?? "", supervisorToken: extra.supervisorToken ?? "" });
}

export function renderWithClient(ui: ReactNode) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false, refetchInterval: false } } });
  return render(<QueryClientProvider client={client}>{ui}</QueryClientProvider>);
}
