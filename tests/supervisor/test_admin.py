from __future__ import annotations

from pathlib import Path

import httpx
from litestar.testing import AsyncTestClient

from flux7.shared.supervisor.admin import AdminServer, create_admin_app
from flux7.shared.supervisor.config import AdminConfig
from flux7.shared.supervisor.loop import Decision, Supervisor
from tests.supervisor.conftest import sup7_config
from tests.support.http import free_port
from tests.support.waiting import eventually

TOKEN = {"Authorization": "Bearer t0k"}


def _supervisor(tmp_path: Path) -> Supervisor:
    return Supervisor(sup7_config(tmp_path, mesh={"url": f"http://127.0.0.1:{free_port()}"}))


async def test_every_route_but_health_needs_the_token(tmp_path: Path) -> None:
    async with AsyncTestClient(create_admin_app(_supervisor(tmp_path), "t0k")) as c:
        assert (await c.get("/health")).json() == {"ok": True}
        for method, path in (("GET", "/status"), ("GET", "/config"), ("GET", "/decisions"), ("POST", "/pause")):
            assert (await c.request(method, path)).status_code == 401
            assert (await c.request(method, path, headers={"Authorization": "Bearer nope"})).status_code == 401
            assert (await c.request(method, path, headers=TOKEN)).status_code == 200


async def test_status_has_the_console_shape_and_pause_resume_flip_it(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    async with AsyncTestClient(create_admin_app(sup)) as c:
        status = (await c.get("/status")).json()
        assert set(status) == {"version", "state", "uptime_s", "mesh", "memory", "evaluator", "decisions"}
        assert status["state"] == "running" and status["mesh"]["reachable"] is False
        assert status["evaluator"] == {"mode": "single", "providers": []}
        assert status["decisions"] == {"approved": 0, "denied": 0, "escalated": 0, "last_at": None}
        assert (await c.post("/pause")).json()["state"] == "paused" and sup.paused
        assert (await c.post("/resume")).json()["state"] == "running" and not sup.paused


async def test_config_shows_rules_and_providers_never_secrets(tmp_path: Path) -> None:
    cfg = sup7_config(tmp_path, evaluator={"provider": "anthropic", "api_key": "sk-ant-secret", "url": "http://x"})
    sup = Supervisor(cfg)
    async with AsyncTestClient(create_admin_app(sup)) as c:
        r = await c.get("/config")
        body = r.json()
    assert "sk-ant-secret" not in r.text and "adm1n" not in r.text
    assert [x["name"] for x in body["rules"]][-1] == "default"
    assert body["evaluator"]["providers"] == [{"provider": "anthropic", "model": "qwen3:14b", "url": "http://x"}]
    assert body["evaluator"]["confidence_threshold"] == 0.8
    await sup.aclose()


async def test_decisions_are_newest_first_and_limited(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    for i in range(5):
        sup.recent.appendleft(
            Decision(
                timestamp=f"t{i}",
                approval_id=f"a{i}",
                agent_id="x",
                tool="t",
                decision="approved",
                rule_matched="r",
                reasoning="ok",
                confidence=0.9,
                evaluation_ms=0,
            )
        )
    async with AsyncTestClient(create_admin_app(sup)) as c:
        got = (await c.get("/decisions", params={"limit": 2})).json()["decisions"]
        assert [d["approval_id"] for d in got] == ["a4", "a3"]
        assert len((await c.get("/decisions", params={"limit": 0})).json()["decisions"]) == 1
        assert (await c.get("/decisions", params={"limit": "many"})).status_code == 400


async def test_the_admin_server_listens_on_its_port_and_stops(tmp_path: Path) -> None:
    port = free_port()
    server = AdminServer(_supervisor(tmp_path), AdminConfig(enabled=True, port=port, token="t0k"))
    server.start()
    try:
        async with httpx.AsyncClient() as c:

            async def health() -> httpx.Response | None:
                try:
                    return await c.get(f"http://127.0.0.1:{port}/health")
                except httpx.TransportError:
                    return None  # still binding

            r = await eventually(health, 5, "the admin API to answer")
            assert r.json() == {"ok": True}
            assert (await c.get(f"http://127.0.0.1:{port}/status")).status_code == 401
    finally:
        await server.stop()
