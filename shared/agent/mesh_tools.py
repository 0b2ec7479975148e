"""The agent's tools are the mesh's: listed from `GET /tools`, called through `POST /tool/{name}`.

Their schemas come from the mesh's own MCP `tools/list` (the stateless revision, one request) when it answers:
it carries MCP upstreams' input schemas verbatim, where `GET /tools` has flat parameters, and it leaves out what
`hide_denied_tools` hides from this agent. A mesh that does not answer it gets schemas built from the parameters.

Every call carries the agent's identity (`Bearer agent:<id>`, or a token) and its session (`X-Session-Id`), so the
mesh applies its policy, grants, limits and approvals to it and traces it like any other agent's call. What the
mesh answers becomes the tool result the model reads: the backend's result on 200, otherwise a short sentence
saying who refused and why (a denial is a result, not a crash: the model can tell the user).

A mesh that refuses the agent's credential (401, or a 403 whose body is not a decision: a revoked or expired
token, an identity it may not claim) is not a mesh that is down: `MeshCredentialRefused` is raised, and the agent
stops instead of running reads ungoverned.

The HTTP is the mesh client's (shared/mesh_client.py); what an answer means to the agent is decided here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

from flux7.shared import __version__
from flux7.shared.agent.conversation import ToolSpec
from flux7.shared.mesh_client import AsyncMeshClient, MeshError, Reply

__all__ = [
    "Decision",
    "MeshCredentialRefused",
    "MeshTool",
    "MeshTools",
    "MeshUnavailable",
    "ToolOutcome",
    "schema_of",
]

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_RESULT_CHARS = 20_000  # what one tool result may put into the conversation
_MCP_REVISION = "2026-07-28"  # stateless: tools/list in one request, no session
_MAX_PAGES = 50


class MeshUnavailable(Exception):
    """The mesh did not answer, or answered what this client cannot read."""


class MeshCredentialRefused(Exception):
    """The mesh answered and refused who the agent says it is: nothing may run until the user fixes it."""


def _credential_refusal(url: str, reply: Reply) -> MeshCredentialRefused | None:
    """The refusal in `reply` when it refuses the credential rather than decides a call: a 401, or a 403 whose
    body carries no decision (a policy's denial has an action or a policy, and a trace id)."""
    if reply.status not in (401, 403):
        return None
    try:
        body = reply.json()
    except ValueError:
        body = None
    if reply.status == 403 and isinstance(body, dict) and ({"action", "policy", "trace_id"} & set(body)):
        return None
    why = str(body.get("error") or "") if isinstance(body, dict) else reply.text[:200]
    return MeshCredentialRefused(f"{url}: HTTP {reply.status}: {why or 'refused'}")


@dataclass(frozen=True)
class MeshTool:
    name: str  # the mesh's name, e.g. `github.create_issue`
    spec: ToolSpec  # as the model sees it, under a provider-safe name
    access: str = "unknown"  # the mesh's classification: read | write | unknown


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # what the model reads
    is_error: bool
    policy: str
    status: int
    trace_id: str = ""
    approval_id: str = ""


@dataclass(frozen=True)
class Decision:
    """The mesh's answer to `POST /decide` for a call the agent runs itself."""

    action: str  # allow | deny (human_approval only when the mesh could not queue it)
    trace_id: str
    rule: str = ""
    reason: str = ""
    approval_id: str = ""
    approval_status: str = ""
    status: int = 200
    halted: bool = False


def schema_of(params: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON Schema object for the model from the mesh's flat parameter list (`{name, in, type, required}`)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in params:
        name = str(p.get("name") or "")
        if not name:
            continue
        kind = str(p.get("type") or "string")
        prop: dict[str, Any] = {"type": kind if kind in _JSON_TYPES else "string"}
        if p.get("in"):
            prop["description"] = f"{p['in']} parameter"
        properties[name] = prop
        if p.get("required"):
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


class MeshTools:
    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        token: str = "",
        session_id: str = "",
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.agent_id = agent_id
        self.session_id = session_id
        self.token = token
        self._transport = transport
        self._timeout = timeout
        # No read timeout by default: a call waiting for a human's approval blocks until the mesh resolves it
        # (approved, denied or timed out by the mesh's own approval timeout).
        self._mesh = AsyncMeshClient(
            url,
            token=token or f"agent:{agent_id}",
            session_id=session_id,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )
        self._by_spec_name: dict[str, str] = {}
        self._access: dict[str, str] = {}

    async def aclose(self) -> None:
        await self._mesh.aclose()

    async def list(self) -> list[MeshTool]:
        """The mesh's tools, each under a name every provider accepts (`[A-Za-z0-9_-]{1,64}`, unique)."""
        try:
            listed = await self._mesh.tools()
        except MeshError as e:
            if e.status in (401, 403):  # GET /tools decides nothing: this refuses the credential
                raise MeshCredentialRefused(f"{self.url}/tools: HTTP {e.status}: {e.message[:200]}") from e
            raise MeshUnavailable(f"{self.url}/tools: {e.detail}") from e
        schemas = await self._mcp_schemas()
        tools: list[MeshTool] = []
        taken: set[str] = set()
        self._by_spec_name = {}
        for item in sorted(listed, key=lambda t: str(t.get("name", ""))):
            name = str(item.get("name") or "")
            if not name or (schemas is not None and name not in schemas):
                continue  # nameless, or hidden from this agent's MCP list (hide_denied_tools)
            safe = _safe_name(name, taken)
            taken.add(safe)
            self._by_spec_name[safe] = name
            description = str(item.get("description") or name)
            schema = (schemas or {}).get(name) or schema_of(list(item.get("params") or []))
            access = str((item.get("classification") or {}).get("access") or "unknown")
            self._access[name] = access
            tools.append(MeshTool(name, ToolSpec(safe, description, schema), access))
        return tools

    async def _mcp_schemas(self) -> dict[str, dict[str, Any]] | None:
        """Each tool's input schema from the mesh's MCP tools/list; None when the mesh does not answer it."""
        meta = {
            "io.modelcontextprotocol/protocolVersion": _MCP_REVISION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "flux7-agent", "version": __version__},
        }
        headers = {"MCP-Protocol-Version": _MCP_REVISION, "Mcp-Method": "tools/list"}
        schemas: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        for page in range(_MAX_PAGES):
            params: dict[str, Any] = {"_meta": meta, **({"cursor": cursor} if cursor else {})}
            body = {"jsonrpc": "2.0", "id": page + 1, "method": "tools/list", "params": params}
            try:
                reply = await self._mesh.post_mcp(json.dumps(body).encode(), headers=headers)
                result = reply.json()["result"] if reply.status == 200 else None
            except (MeshError, ValueError, KeyError, TypeError):
                return None
            if not isinstance(result, dict):
                return None
            for tool in result.get("tools") or []:
                schema = tool.get("inputSchema") if isinstance(tool, dict) else None
                if isinstance(schema, dict) and schema.get("type") == "object":
                    schemas[str(tool.get("name"))] = schema
            cursor = result.get("nextCursor") or None
            if cursor is None:
                break
        return schemas

    def child(self, name: str) -> MeshTools:
        """The same mesh and session for a sub-agent, as `<agent>/<name>` (with a token, the mesh sees the
        token's identity instead: a token names one agent)."""
        return MeshTools(
            self.url,
            f"{self.agent_id}/{name}",
            token=self.token,
            session_id=self.session_id,
            timeout=self._timeout,
            transport=self._transport,
        )

    def set_session(self, session_id: str) -> None:
        """Carry another session's id from now on (a resumed session keeps its mesh session id)."""
        self.session_id = session_id
        self._mesh.set_session(session_id)

    def access(self, name: str) -> str:
        """The mesh's classification of a listed tool: read | write | unknown."""
        return self._access.get(name, "unknown")

    def mesh_name(self, spec_name: str) -> str | None:
        """The mesh's tool behind a name the model used; None for a name that was never offered."""
        return self._by_spec_name.get(spec_name)

    def approval_hint(self, approval_id: str = "") -> str:
        """How a person approves a held call: the console's approvals page, and the mesh CLI."""
        cli = f"mesh approve {approval_id}" if approval_id else "mesh pending, then mesh approve <id>"
        return f"approve or deny it in the console ({self.url}/console/#/approvals) or with `{cli}`"

    async def pending_approval(self, name: str) -> str:
        """The id of this agent's newest pending approval of `name`, when the mesh lets this caller see its
        approvals (loopback without an admin token, or an admin token); "" otherwise."""
        try:
            listed = await self._mesh.approvals("pending", name, timeout=5.0)
        except MeshError:
            return ""
        mine = [a for a in listed if a.get("agent_id") == self.agent_id]
        return str(mine[0].get("id") or "") if mine else ""

    async def decide(
        self, name: str, arguments: dict[str, Any], *, trace_id: str = "", preview: dict[str, str] | None = None
    ) -> Decision:
        """Ask the mesh whether this agent may run `name` itself. A call held for a human's approval waits in the mesh's
        queue (`wait`) until someone resolves it there. `trace_id` names the call's trace (`X-Trace-Id`), so the
        agent knows it before the answer; `preview` (an edit's diff) is shown to whoever approves it. Raises
        MeshUnavailable when the mesh cannot be asked, so the caller can fail closed."""
        body: dict[str, Any] = {"tool": name, "arguments": arguments, "wait": True}
        if preview is not None:
            body["preview"] = preview
        headers = {"X-Trace-Id": trace_id} if trace_id else None
        try:
            reply = await self._mesh.send("POST", "/decide", json=body, headers=headers)
        except MeshError as e:
            raise MeshUnavailable(f"{self.url}/decide: {e.detail}") from e
        if (refused := _credential_refusal(f"{self.url}/decide", reply)) is not None:
            raise refused
        try:
            answer = reply.json()
        except ValueError as e:
            raise MeshUnavailable(f"{self.url}/decide: HTTP {reply.status}, not JSON") from e
        if not isinstance(answer, dict) or reply.status not in (200, 403, 408, 429):
            raise MeshUnavailable(f"{self.url}/decide: HTTP {reply.status}: {str(answer)[:200]}")
        action = str(answer.get("action") or "deny")
        reason = str(answer.get("error") or answer.get("reason") or "")
        return Decision(
            action if reply.status == 200 else "deny",
            str(answer.get("trace_id") or ""),
            str(answer.get("rule") or ""),
            reason,
            str(answer.get("approval_id") or ""),
            str(answer.get("approval_status") or ""),
            reply.status,
            bool(answer.get("halted")),
        )

    async def report(
        self,
        trace_id: str,
        *,
        ok: bool,
        exit_code: int | None,
        size: int,
        duration_ms: float,
        error: str,
        agent_id: str = "",
    ) -> bool:
        """Complete the /decide'd call's trace with what running it did; False when the mesh did not take it
        (the tool already ran: the result stands, the trace keeps the decision only)."""
        return (
            await self.report_status(
                trace_id,
                ok=ok,
                exit_code=exit_code,
                size=size,
                duration_ms=duration_ms,
                error=error,
                agent_id=agent_id,
            )
        )[0] == 200

    async def report_status(
        self,
        trace_id: str,
        *,
        ok: bool,
        exit_code: int | None = None,
        size: int = 0,
        duration_ms: float = 0.0,
        error: str = "",
        agent_id: str = "",
    ) -> tuple[int, str]:
        """`report`, answering the mesh's status and error (0 when it did not answer). `agent_id` reports as
        another of this agent's ids (a sub-agent's), when the credential is the claim `agent:<id>`."""
        body: dict[str, Any] = {"ok": ok, "bytes": size, "duration_ms": round(duration_ms, 3), "error": error}
        if exit_code is not None:
            body["exit_code"] = exit_code
        headers = None
        if agent_id and agent_id != self.agent_id and not self.token:
            headers = {"Authorization": f"Bearer agent:{agent_id}"}
        try:
            reply = await self._mesh.send(
                "POST", f"/decide/{trace_id}/outcome", json=body, timeout=10.0, headers=headers
            )
        except MeshError as e:
            return 0, e.__cause__.__class__.__name__
        try:
            said = reply.json().get("error", "") if reply.status != 200 else ""
        except (ValueError, AttributeError):
            said = reply.text[:200]
        return reply.status, str(said)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """One governed call. Never raises for what the mesh decides; a mesh that does not answer is an error
        result too, so the model hears about it and nothing runs around the mesh. A refused credential raises
        MeshCredentialRefused."""
        try:
            reply = await self._mesh.call_tool(name, arguments)
        except MeshError as e:
            return ToolOutcome(f"error: the mesh did not answer ({e.__cause__.__class__.__name__})", True, "error", 0)
        if (refused := _credential_refusal(f"{self.url}/tool/{name}", reply)) is not None:
            raise refused
        try:
            body = reply.json()
        except ValueError:
            body = {"error": reply.text[:300]}
        if not isinstance(body, dict):
            body = {"result": body}
        policy = str(body.get("policy") or ("error" if reply.status >= 400 else "allow"))
        ok = reply.status == 200
        return ToolOutcome(
            _clip(_as_text(body.get("result"))) if ok else _refusal(reply.status, policy, str(body.get("error") or "")),
            not ok,
            policy,
            reply.status,
            trace_id=str(body.get("trace_id") or ""),
            approval_id=str(body.get("approval_id") or ""),
        )


def _safe_name(name: str, taken: set[str]) -> str:
    base = _UNSAFE.sub("_", name)[:60] or "tool"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    return candidate


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, dict) and isinstance(result.get("content"), list):  # an MCP tool's result
        texts = [str(c.get("text", "")) for c in result["content"] if isinstance(c, dict) and c.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return json.dumps(result, ensure_ascii=False, default=str)


def _clip(text: str) -> str:
    if len(text) <= _MAX_RESULT_CHARS:
        return text
    return text[:_MAX_RESULT_CHARS] + f"\n[... {len(text) - _MAX_RESULT_CHARS} more characters cut]"


def _refusal(status: int, policy: str, error: str) -> str:
    """What the model reads when the call did not run (or failed): who decided, and why."""
    why = error or f"HTTP {status}"
    if policy == "halted":
        return f"refused: the mesh is halted for this agent ({why}). Do not retry; tell the user."
    if status == 403 and policy == "deny":
        return f"refused by policy: {why}. Do not retry this call; tell the user."
    if status == 403 and policy == "human_approval":
        return f"refused: {why}. Do not retry this call; tell the user."
    if status == 408:
        return "refused: the approval request timed out without an answer. Tell the user."
    if status == 429:
        return f"refused: {why} (rate limit or loop detection). Wait or change approach."
    if status == 404:
        return f"error: {why}"
    return f"error: the tool failed ({why})"
