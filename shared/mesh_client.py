"""The one client of the mesh's own HTTP API (CONTRACT 1.6), for everything of flux7 that calls a running mesh:
the `mesh` / `flux7 approvals` and `flux7 governance` CLIs (shared/cli/control_plane.py), sup7
(shared/supervisor/mesh_api.py), the terminal agent (shared/agent/mesh_tools.py) and the stdio relay
(shared/mcp/stdio.py).

It exists so that what every caller must get the same is written once: the base URL, the credential (`Bearer`, and
`X-Session-Id` when given), the timeouts, `trust_env=False` (a proxy variable never reroutes a call meant for the
mesh), what a refusal is (`MeshError`: the HTTP status and the JSON `error` field's message; status 0 when the mesh
did not answer) and how an answer is read. `MeshClient` is synchronous (the CLIs), `AsyncMeshClient` asynchronous;
both build every request and read every answer through `_Core`, and only the I/O differs. A transport can be
given (`httpx.MockTransport`, `httpx.ASGITransport`), so tests drive the real app in process.

Callers keep their own domain: which token they hold, what a refusal means to them (sup7's MeshUnavailable, the
agent's credential refusal), and how they show it."""

from __future__ import annotations

import json as jsonlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, TypedDict, cast

import httpx

__all__ = [
    "DEFAULT_TIMEOUT",
    "Approval",
    "AsyncMeshClient",
    "Health",
    "MeshClient",
    "MeshError",
    "Reply",
    "Resolved",
    "Timeout",
    "Tool",
]

DEFAULT_TIMEOUT = 30.0
Timeout = float | httpx.Timeout | None  # None: no timeout at all

# The shapes the callers read. Approvals and tools stay dicts: sup7 hands approvals on whole to its rules and its
# LLM, and an older mesh leaves out fields a newer one adds.
Approval = dict[str, Any]  # an approvalView (CONTRACT 1.8); the detail adds recent_traces and active_grants
Tool = dict[str, Any]  # a GET /tools entry (CONTRACT 1.6; shared/upstreams/base.py ToolView)


class Health(TypedDict, total=False):
    """GET /health (CONTRACT 1.6; shared/mesh.py Health). `config` is missing from meshes older than it."""

    status: str  # "ok", or "degraded" with `problems`
    tools: int
    traces: dict[str, int]
    version: str
    config: str
    problems: list[str]


class Resolved(TypedDict, total=False):
    """POST /approvals/{id}/approve|deny: `{status, id}`; with four eyes, how far the approval is."""

    status: str
    id: str
    approvals: int
    required_approvals: int


class MeshError(Exception):
    """The mesh refused a call (`status` is its HTTP status, the message its JSON `error` field, else its text), or
    did not answer (`status` 0; the transport's exception is `__cause__`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def detail(self) -> str:
        """What went wrong, for a log line: the transport's error when there was no answer, else the status and
        the start of the message."""
        if self.status == 0 and self.__cause__ is not None:
            return f"{self.__cause__.__class__.__name__}: {self.__cause__}"
        return f"HTTP {self.status}: {self.message[:200]}"


@dataclass(frozen=True)
class Reply:
    """An answer as the mesh gave it, whatever its status: for routes where a refusal is an answer too (a governed
    call's 403 is a policy's decision) and for MCP, whose bodies are relayed as they are."""

    status: int
    content: bytes
    headers: Mapping[str, str]  # case-insensitive (httpx.Headers)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return jsonlib.loads(self.content)

    def error(self) -> str:
        """What a refusal says: the JSON `error` field, else the body's text, else the status's reason."""
        try:
            body = self.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("error"):
            return str(body["error"])
        return self.text.strip() or httpx.codes.get_reason_phrase(self.status)


class _Core:
    """What both flavours share: the settings, how a request is built, and how an answer is read."""

    def __init__(self, url: str, *, token: str = "", session_id: str = "", timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if session_id:
            headers["X-Session-Id"] = session_id
        # what the httpx client of either flavour is built with; trust_env=False: no proxy or .netrc from the env
        self._options: dict[str, Any] = {
            "base_url": self.url,
            "headers": headers,
            "timeout": timeout,
            "trust_env": False,
        }

    @staticmethod
    def _build(
        http: httpx.Client | httpx.AsyncClient,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Request:
        # a parameter without a value is left out: `tool=""` means every tool, as no `tool` does
        query = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        return http.build_request(
            method,
            path,
            json=json,
            content=content,
            params=query or None,
            headers=headers,
            timeout=http.timeout if timeout is None else timeout,  # None: the client's own
        )

    def _unreachable(self, e: httpx.HTTPError) -> MeshError:
        return MeshError(0, f"cannot reach the mesh at {self.url}: {e}")

    @staticmethod
    def _reply(response: httpx.Response) -> Reply:
        return Reply(response.status_code, response.content, response.headers)

    @staticmethod
    def _decoded(reply: Reply, what: str) -> Any:
        """The JSON of a successful answer (None for an empty one); a MeshError for anything else."""
        if not reply.ok:
            raise MeshError(reply.status, reply.error())
        if not reply.content.strip():
            return None
        try:
            return reply.json()
        except ValueError:
            raise MeshError(reply.status, f"{what}: the mesh's answer is not JSON") from None


_JSON = {"Accept": "application/json"}
_MCP = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# A successful answer of the wrong shape is a MeshError with status 200: the mesh answered, not what was asked.
def _list_of_dicts(body: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(body, list):
        raise MeshError(200, f"{what} did not answer a list")
    return [item for item in body if isinstance(item, dict)]


def _dict(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise MeshError(200, f"{what} did not answer an object")
    return body


def _resolution(
    decision: str, resolved_by: str | None, reasoning: str | None, confidence: float | None
) -> dict[str, Any]:
    if decision not in ("approve", "deny"):
        raise ValueError(f"decision must be approve or deny, not {decision!r}")
    body = {"resolved_by": resolved_by, "reasoning": reasoning, "confidence": confidence}
    return {k: v for k, v in body.items() if v is not None}


def _mcp_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {**_MCP, **(headers or {})}


class MeshClient(_Core):
    """The mesh's API, synchronously. Close it (or use it as a context manager) when done."""

    def __init__(
        self,
        url: str,
        *,
        token: str = "",
        session_id: str = "",
        timeout: Timeout = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token=token, session_id=session_id, timeout=timeout)
        self._http = httpx.Client(transport=transport, **self._options)

    def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """One call; whatever the mesh answers is the Reply. MeshError (status 0) only when it does not answer."""
        request = self._build(
            self._http, method, path, json=json, content=content, params=params, headers=headers, timeout=timeout
        )
        try:
            return self._reply(self._http.send(request))
        except httpx.HTTPError as e:
            raise self._unreachable(e) from e

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One JSON call: the answer's JSON (None when empty); MeshError when it is refused or not answered."""
        reply = self.send(method, path, json=json, params=params, headers=_JSON, timeout=timeout)
        return self._decoded(reply, f"{method} {path}")

    def health(self) -> Health:
        return cast(Health, _dict(self.request("GET", "/health"), "GET /health"))

    def approvals(self, status: str = "pending", tool: str = "", *, timeout: float | None = None) -> list[Approval]:
        """GET /approvals: `status` pending, or anything else for all; `tool` a glob."""
        body = self.request("GET", "/approvals", params={"status": status, "tool": tool}, timeout=timeout)
        return _list_of_dicts(body, "GET /approvals")

    def approval(self, approval_id: str) -> Approval:
        """GET /approvals/{id} (an id or a unique prefix)."""
        return _dict(self.request("GET", f"/approvals/{approval_id}"), f"GET /approvals/{approval_id}")

    def resolve(
        self,
        approval_id: str,
        decision: str,
        *,
        resolved_by: str | None = None,
        reasoning: str | None = None,
        confidence: float | None = None,
    ) -> Resolved:
        """POST /approvals/{id}/approve|deny; a MeshError 409 when someone settled it first."""
        body = _resolution(decision, resolved_by, reasoning, confidence)
        answer = self.request("POST", f"/approvals/{approval_id}/{decision}", json=body)
        return cast(Resolved, _dict(answer, f"POST /approvals/{approval_id}/{decision}"))

    def tools(self) -> list[Tool]:
        return _list_of_dicts(self.request("GET", "/tools"), "GET /tools")

    def call_tool(self, name: str, params: Mapping[str, Any]) -> Reply:
        """POST /tool/{name}: every status is an answer (a decision, an approval's outcome, the backend's)."""
        return self.send("POST", f"/tool/{name}", json={"params": params})

    def post_mcp(self, message: bytes, *, headers: Mapping[str, str] | None = None) -> Reply:
        """POST /mcp with one JSON-RPC message as it is; the answer as it is."""
        return self.send("POST", "/mcp", content=message, headers=_mcp_headers(headers))

    def end_mcp_session(self, mcp_session_id: str) -> Reply:
        return self.send("DELETE", "/mcp", headers=_mcp_headers({"Mcp-Session-Id": mcp_session_id}))

    def set_session(self, session_id: str) -> None:
        """Carry another session's id (`X-Session-Id`) from now on."""
        self._http.headers["X-Session-Id"] = session_id

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMeshClient(_Core):
    """The mesh's API, asynchronously: the same calls as MeshClient's. `aclose()` it when done."""

    def __init__(
        self,
        url: str,
        *,
        token: str = "",
        session_id: str = "",
        timeout: Timeout = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token=token, session_id=session_id, timeout=timeout)
        self._http = httpx.AsyncClient(transport=transport, **self._options)

    async def send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """One call; whatever the mesh answers is the Reply. MeshError (status 0) only when it does not answer."""
        request = self._build(
            self._http, method, path, json=json, content=content, params=params, headers=headers, timeout=timeout
        )
        try:
            return self._reply(await self._http.send(request))
        except httpx.HTTPError as e:
            raise self._unreachable(e) from e

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One JSON call: the answer's JSON (None when empty); MeshError when it is refused or not answered."""
        reply = await self.send(method, path, json=json, params=params, headers=_JSON, timeout=timeout)
        return self._decoded(reply, f"{method} {path}")

    async def health(self) -> Health:
        return cast(Health, _dict(await self.request("GET", "/health"), "GET /health"))

    async def approvals(
        self, status: str = "pending", tool: str = "", *, timeout: float | None = None
    ) -> list[Approval]:
        """GET /approvals: `status` pending, or anything else for all; `tool` a glob."""
        body = await self.request("GET", "/approvals", params={"status": status, "tool": tool}, timeout=timeout)
        return _list_of_dicts(body, "GET /approvals")

    async def approval(self, approval_id: str) -> Approval:
        """GET /approvals/{id} (an id or a unique prefix)."""
        return _dict(await self.request("GET", f"/approvals/{approval_id}"), f"GET /approvals/{approval_id}")

    async def resolve(
        self,
        approval_id: str,
        decision: str,
        *,
        resolved_by: str | None = None,
        reasoning: str | None = None,
        confidence: float | None = None,
    ) -> Resolved:
        """POST /approvals/{id}/approve|deny; a MeshError 409 when someone settled it first."""
        body = _resolution(decision, resolved_by, reasoning, confidence)
        answer = await self.request("POST", f"/approvals/{approval_id}/{decision}", json=body)
        return cast(Resolved, _dict(answer, f"POST /approvals/{approval_id}/{decision}"))

    async def tools(self) -> list[Tool]:
        return _list_of_dicts(await self.request("GET", "/tools"), "GET /tools")

    async def call_tool(self, name: str, params: Mapping[str, Any]) -> Reply:
        """POST /tool/{name}: every status is an answer (a decision, an approval's outcome, the backend's)."""
        return await self.send("POST", f"/tool/{name}", json={"params": params})

    async def post_mcp(self, message: bytes, *, headers: Mapping[str, str] | None = None) -> Reply:
        """POST /mcp with one JSON-RPC message as it is; the answer as it is."""
        return await self.send("POST", "/mcp", content=message, headers=_mcp_headers(headers))

    async def end_mcp_session(self, mcp_session_id: str) -> Reply:
        return await self.send("DELETE", "/mcp", headers=_mcp_headers({"Mcp-Session-Id": mcp_session_id}))

    def set_session(self, session_id: str) -> None:
        """Carry another session's id (`X-Session-Id`) from now on."""
        self._http.headers["X-Session-Id"] = session_id

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
