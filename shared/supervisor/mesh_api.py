"""sup7's view of the mesh: the supervisor protocol of CONTRACT 1.13 over HTTP.

It authenticates with its own agent token when it has one (the mesh records its decisions as
`supervisor:<agent_id>` from that credential), else with the admin token (its decisions are then the owner
credential's, noted as the supervisor's and never counted as a human's), else as the mesh7 SDK does
(`Bearer agent:<agent_id>`, believed only by a mesh in the open-loopback trust mode). Its HTTP is the mesh
client's (shared/mesh_client.py)."""

from __future__ import annotations

import httpx

from flux7.shared.mesh_client import Approval, AsyncMeshClient, MeshError

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
        self._client = AsyncMeshClient(url, token=token, timeout=timeout, transport=transport)
        self.url = self._client.url

    async def is_healthy(self) -> bool:
        try:
            body = await self._client.health()
        except MeshError:
            return False
        return body.get("status") == "ok"

    async def pending(self, tool_scope: str | None = None) -> list[Approval]:
        try:
            return await self._client.approvals("pending", tool_scope or "")
        except MeshError as e:
            raise MeshUnavailable(f"{self.url}/approvals: {e.detail}") from e

    async def approval_detail(self, approval_id: str) -> Approval:
        try:
            return await self._client.approval(approval_id)
        except MeshError as e:
            raise MeshUnavailable(f"{self.url}/approvals/{approval_id}: {e.detail}") from e

    async def resolve(
        self, approval_id: str, action: str, *, resolved_by: str, reasoning: str, confidence: float
    ) -> int:
        """POST /approvals/{id}/approve|deny; returns the status (200 resolved, 409 already resolved)."""
        try:
            await self._client.resolve(
                approval_id, action, resolved_by=resolved_by, reasoning=reasoning, confidence=confidence
            )
        except MeshError as e:
            if e.status == 0:
                raise MeshUnavailable(f"resolve {approval_id}: {e.detail}") from e
            return e.status
        return 200

    async def aclose(self) -> None:
        await self._client.aclose()
