// The official TypeScript MCP SDK's OAuth client against flux7's /mcp, driven by tests/e2e/test_oauth_clients.py,
// which plays the browser and the human.
// Usage: node oauth_client.mjs <mcp url> <callback port> [client metadata document URL]
// With a document URL the SDK uses it as its client id where the server takes one (Client ID Metadata Documents)
// instead of registering.
// One JSON object a line on stdout; the test answers on stdin when the next step may run:
//   {"authorize": url}             the SDK sent the browser there; the test approves or denies, then follows the
//                                  redirect to this script's loopback callback
//   {"step": "connected", ...}     tools listed and a governed call made with the tokens
//   <- "next"                       (the access token has expired)
//   {"step": "refreshed", ...}     the same call, after the SDK refreshed on the server's 401
//   <- "next"                       (the connection was revoked)
//   {"step": "revoked", ...}       the call that followed: the SDK's refresh is refused, it asks for a new consent
import http from "node:http";
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, port, metadataUrl] = process.argv.slice(2);
const redirectUrl = `http://127.0.0.1:${port}/callback`;
const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const callbacks = [];
let waiting = null;
http
  .createServer((req, res) => {
    const query = Object.fromEntries(new URL(req.url, redirectUrl).searchParams);
    res.writeHead(200, { "content-type": "text/plain" }).end("You can close this window.");
    if (waiting) {
      const w = waiting;
      waiting = null;
      w(query);
    } else callbacks.push(query);
  })
  .listen(Number(port), "127.0.0.1");
const nextCallback = () =>
  callbacks.length ? Promise.resolve(callbacks.shift()) : new Promise((resolve) => (waiting = resolve));

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const nextLine = async () => (await lines.next()).value;

class MemoryProvider {
  constructor() {
    this.saved = {};
    this.issued = [];
  }
  get redirectUrl() {
    return redirectUrl;
  }
  get clientMetadataUrl() {
    return metadataUrl;
  }
  get clientMetadata() {
    return {
      client_name: "flux7 TS SDK test",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() {
    return "ts-state";
  }
  clientInformation() {
    return this.saved.client;
  }
  saveClientInformation(client) {
    this.saved.client = client;
  }
  tokens() {
    return this.saved.tokens;
  }
  saveTokens(tokens) {
    this.saved.tokens = tokens;
    this.issued.push(tokens.access_token);
  }
  redirectToAuthorization(authorizationUrl) {
    emit({ authorize: authorizationUrl.toString() });
  }
  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
  invalidateCredentials(scope) {
    if (scope === "all" || scope === "client") delete this.saved.client;
    if (scope === "all" || scope === "tokens") delete this.saved.tokens;
    if (scope === "all" || scope === "verifier") delete this.saved.verifier;
  }
}

const provider = new MemoryProvider();
const connect = async () => {
  const client = new Client({ name: "flux7-ts-oauth-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
  return client;
};
const call = async (client) => {
  try {
    return await client.callTool({ name: "list_pets", arguments: {} });
  } catch (e) {
    return { thrown: String(e.message ?? e) };
  }
};

// 1. The first connection meets the 401: discovery, registration, and the browser sent to authorize.
const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
try {
  await new Client({ name: "flux7-ts-oauth-test", version: "1.0.0" }).connect(first);
  emit({ step: "error", error: "connected without authorization" });
  process.exit(1);
} catch (e) {
  if (!(e instanceof UnauthorizedError)) throw e;
}
const answer = await nextCallback();
if (!answer.code) {
  emit({ step: "refused", callback: answer });
  process.exit(0);
}
await first.finishAuth(answer.code);
const client = await connect();
const { tools } = await client.listTools();
emit({
  step: "connected",
  callback: answer,
  client_id: provider.saved.client.client_id,
  tools: tools.map((t) => t.name),
  result: await call(client),
  tokens: { ...provider.saved.tokens },
});

// 2. The access token expired meanwhile: the server's 401 makes the SDK refresh, and the call goes through.
await nextLine();
const result = await call(client);
emit({ step: "refreshed", result, issued: provider.issued.length, tokens: { ...provider.saved.tokens } });

// 3. The connection was revoked: the refresh is refused, the SDK asks for a new authorization.
await nextLine();
emit({ step: "revoked", result: await call(client) });
await client.close();
process.exit(0);
