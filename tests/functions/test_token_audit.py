"""Issuing and revoking an agent token over the control plane leaves a trace entry each (never the secret)."""

from __future__ import annotations

from pathlib import Path

import httpx

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import ADMIN, make_config
from tests.support.mesh import in_process
from tests.upstreams.servers.http_backend import Backend


async def test_token_issue_and_revoke_are_traced_without_the_secret(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend, "auth: {admin_token: adm1n}")
    async with (
        in_process(Mesh(load_settings(cfg, env={}))) as transport,
        httpx.AsyncClient(transport=transport, base_url="http://mesh", headers=ADMIN) as client,
    ):
        issued = await client.post("/tokens", json={"agent": "ci-runner", "note": "nightly", "by": "x"})
        assert issued.status_code == 201
        token, token_id = issued.json()["token"], issued.json()["id"]
        assert (await client.delete(f"/tokens/{token_id}")).status_code == 200
        traces = (await client.get("/traces", params={"limit": 10})).json()
    events = {t["tool"]: t for t in traces if t["tool"].startswith("mesh.token_")}
    assert set(events) == {"mesh.token_issue", "mesh.token_revoke"}
    for event in events.values():
        assert event["params"] == {"agent": "ci-runner", "id": token_id, "note": "nightly"}
    assert token not in str(traces)
