// The official TypeScript MCP SDK client over Streamable HTTP, driven by tests/mcp_server/test_typescript_sdk.py.
// Usage: node client.mjs <mcp url> <agent> '<json list of [tool, arguments]>'
// Prints one JSON object: {protocolVersion, tools, results}; a call the SDK refuses or the server answers with a
// JSON-RPC error becomes {"thrown": {"code", "message"}} in place of its result.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, agent, callsJson] = process.argv.slice(2);
const calls = JSON.parse(callsJson ?? "[]");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer agent:${agent}` } },
});
const client = new Client({ name: "flux7-ts-test", version: "1.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
const results = [];
for (const [name, args] of calls) {
  try {
    results.push(await client.callTool({ name, arguments: args }));
  } catch (e) {
    results.push({ thrown: { code: e.code ?? null, message: String(e.message ?? e) } });
  }
}
process.stdout.write(
  JSON.stringify({ protocolVersion: transport.protocolVersion ?? null, tools, results }) + "\n",
);
await client.close();
