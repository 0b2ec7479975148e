// mem7 over POST /rpc (JSON-RPC 2.0 tools/call). /rpc answers HTTP 200 even for errors, so both
// JSON-RPC errors and `isError` results become MemoryError with the server's text.
import { ApiError, request } from "./client";
import type { MemoryChain } from "./types";

export class MemoryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MemoryError";
  }
}

interface RpcResponse {
  jsonrpc: string;
  id?: unknown;
  result?: { content?: { type: string; text?: string }[]; isError?: boolean };
  error?: { code: number; message: string };
}

let nextId = 1;

export async function callMemoryTool(name: string, args: Record<string, unknown>): Promise<string> {
  // Empty optional arguments are not sent, as the SDK does.
  const clean: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(args)) {
    if (v === undefined || v === null || v === "" || (Array.isArray(v) && v.length === 0)) continue;
    clean[k] = v;
  }
  const res = await request<RpcResponse | string>("memory", "/rpc", {
    method: "POST",
    body: { jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name, arguments: clean } },
  });
  if (typeof res === "string") throw new ApiError("memory", 200, `Unexpected reply from /rpc: ${res.slice(0, 200)}`);
  if (res.error) throw new MemoryError(res.error.message);
  const text = res.result?.content?.find((c) => c.type === "text")?.text ?? "";
  if (res.result?.isError) throw new MemoryError(text || "memory tool failed");
  return text;
}

export const memoryChain = (signal?: AbortSignal) => request<MemoryChain>("memory", "/memory/chain", { signal });
