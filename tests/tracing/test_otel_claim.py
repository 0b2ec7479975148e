"""An MCP call approved while its request waits (approval.wait_seconds) is run again in the same request: the
queued row and the run each get their own span, the run under the queued one, with the upstream call under it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.mcp_server.inproc import Rpc
from tests.support.mesh import mesh_client
from tests.support.waiting import eventually

CONFIG = """
storage_path: {tmp}/flux7.db
approval: {{timeout_seconds: 60, wait_seconds: 30, channel: queue}}
memory: {{enabled: false}}
supervisor: {{auto_approve: false}}
cli_tools:
  - {{name: say, bin: /bin/echo, bare: {{timeout: 5s}}}}
policies:
  - name: claude
    agent: claude
    rules: [{{tools: ["say.run"], action: human_approval}}]
"""


async def test_the_rerun_of_an_approved_claim_is_its_own_span_under_the_queued_one(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG.format(tmp=tmp_path))
    mesh = Mesh(load_settings(cfg, env={}))
    async with mesh_client(mesh) as client:
        rpc = await Rpc(client).open()
        call = asyncio.create_task(rpc.call("say.run", {"args": ["hi"]}))
        # the request waits up to wait_seconds for a decision
        [pending] = await eventually(lambda: mesh.approvals.query("pending"), what="the queued approval")
        assert not call.done()
        mesh.approvals.resolve(pending.id, "approve", resolved_by="ann", resolver="")
        result = await asyncio.wait_for(call, 30)
        assert result.get("isError") is not True and "hi" in str(result), result
        export = mesh.tracer.otlp(tool="say.run")
    spans = export["resourceSpans"][0]["scopeSpans"][0]["spans"]
    by_kind = sorted((s["kind"], s["name"]) for s in spans)
    assert by_kind == [(2, "tools/call say.run"), (2, "tools/call say.run"), (3, "execute_tool say.run")]
    assert len({s["spanId"] for s in spans}) == 3 and len({s["traceId"] for s in spans}) == 1
    client_span = next(s for s in spans if s["kind"] == 3)
    run = next(s for s in spans if s["spanId"] == client_span["parentSpanId"])
    queued = next(s for s in spans if s["kind"] == 2 and s is not run)
    assert run["parentSpanId"] == queued["spanId"]
    statuses = {a["key"]: a["value"] for a in queued["attributes"]}
    assert statuses["approval.id"] == {"stringValue": pending.id}
