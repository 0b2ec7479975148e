"""sup7's view of the mesh: the supervisor protocol of CONTRACT 1.13 over HTTP.

It authenticates with its own agent token when it has one (the mesh records its decisions as
`supervisor:<agent_id>` from that credential), else with the admin token (its decisions are then the owner
credential's, noted as the supervisor's and never counted as a human's), else as the mesh7 SDK does
(`Bearer agent:<agent_id>`, believed only by a mesh in the open-loopback trust mode)."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["MeshApi", "MeshUnavailable"]


class MeshUnavailable(Exception):
    """The mesh did not answer, or answered with an unexpected status."""


class MeshApi:
    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        token: str = "",
        admin_token: str = "",
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        token = token or admin_token or f"agent:{agent_id}"
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            resp = await self._client.get(path, params=params)
        except httpx.HTTPError as e:
            raise MeshUnavailable(f"{self.url}{path}: {e.__class__.__name__}: {e}") from e
        if resp.status_code != 200:
            raise MeshUnavailable(f"{self.url}{path}: HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()
        except ValueError as e:
            raise MeshUnavailable(f"{self.url}{path}: not JSON") from e

    async def is_healthy(self) -> bool:
        try:
            body = await self._get("/health")
        except MeshUnavailable:
            return False
        return isinstance(body, dict) and body.get("status") == "ok"

    async def pending(self, tool_scope: str | None = None) -> list[dict[str, Any]]:
        params = {"status": "pending"}
        if tool_scope:
            params["tool"] = tool_scope
        body = await self._get("/approvals", params)
        if not isinstance(body, list):
            raise MeshUnavailable("GET /approvals did not answer a list")
        return [a for a in body if isinstance(a, dict)]

    async def approval_detail(self, approval_id: str) -> dict[str, Any]:
        body = await self._get(f"/approvals/{approval_id}")
        if not isinstance(body, dict):
            raise MeshUnavailable(f"GET /approvals/{approval_id} did not answer an object")
        return body

    async def resolve(
        self, approval_id: str, action: str, *, resolved_by: str, reasoning: str, confidence: float
    ) -> int:
        """POST /approvals/{id}/approve|deny; returns the status (200 resolved, 409 already resolved)."""
        if action not in ("approve", "deny"):
            raise ValueError(f"action must be approve or deny, not {action!r}")
        body = {"resolved_by": resolved_by, "reasoning": reasoning, "confidence": confidence}
        try:
            resp = await self._client.post(f"/approvals/{approval_id}/{action}", json=body)
        except httpx.HTTPError as e:
            raise MeshUnavailable(f"resolve {approval_id}: {e.__class__.__name__}: {e}") from e
        return resp.status_code

    async def aclose(self) -> None:
        await self._client.aclose()
