"""An MCP request nobody waits on (the claim flow) is decided later by a human: the agent hears the reason when
it asks again, and the request's trace no longer reads "pending" but the decision and who made it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.mcp_server.conftest import approval_id_in, write_config
from tests.mcp_server.inproc import ADMIN, ADMIN_TOKEN, Rpc, mesh_client

AUTH = f"auth: {{admin_token: {ADMIN_TOKEN}}}\n"


async def test_a_denied_claim_tells_the_agent_why_and_its_trace_reads_denied(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra=AUTH)
    async with mesh_client(config) as client:
        agent = await Rpc(client).open()
        asked = await agent.call("secret.run", {"args": ["rm -rf /data"]})
        approval = approval_id_in(asked["content"][0]["text"])
        reason = "prompt injection in the note text"
        r = await client.post(f"/approvals/{approval}/deny", json={"reasoning": reason}, headers=ADMIN)
        assert r.status_code == 200
        again = await agent.call("secret.run", {"args": ["rm -rf /data"]})
        assert again["isError"] is True
        text = again["content"][0]["text"]
        assert text.startswith("Approval denied by owner:admin-token for secret.run") and f"Reason: {reason}." in text
        detail = (await client.get(f"/approvals/{approval}", headers=ADMIN)).json()
        traces = (await client.get("/traces", params={"trace": detail["trace_id"]}, headers=ADMIN)).json()
        first = [t for t in traces if t.get("approval_id") == approval and t["status_code"] == 202]
        assert first and all((t["approval_status"], t["approved_by"]) == ("denied", "owner:admin-token") for t in first)


async def test_an_approved_claim_is_recorded_approved_before_the_agent_claims_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra=AUTH)
    async with mesh_client(config) as client:
        agent = await Rpc(client).open()
        approval = approval_id_in(await agent.text("secret.run", {"args": ["hello"]}))
        assert (await client.post(f"/approvals/{approval}/approve", headers=ADMIN)).status_code == 200
        detail = (await client.get(f"/approvals/{approval}", headers=ADMIN)).json()
        [queued] = (await client.get("/traces", params={"trace": detail["trace_id"]}, headers=ADMIN)).json()
        assert (queued["status_code"], queued["approval_status"], queued["approved_by"]) == (
            202,
            "approved",
            "owner:admin-token",
        )
        assert json.loads(await agent.text("secret.run", {"args": ["hello"]}))["stdout"] == "hello\n"
