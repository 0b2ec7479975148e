"""The integration routes at the HTTP edge, in process: the browser guard lifts only its JSON rule for Slack's form
callback (cross-site requests are still refused, other routes still want JSON), and each route is a 404 when its
channel is not configured."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh

from .slack_standin import BOT_TOKEN

SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
async def client_of() -> AsyncIterator[Callable[[Mesh], httpx.AsyncClient]]:
    opened: list[httpx.AsyncClient] = []

    def make(mesh: Mesh) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(create_app(mesh), client=("127.0.0.1", 40000))
        client = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9090")
        opened.append(client)
        return client

    yield make
    for c in opened:
        await c.aclose()


SLACK: dict[str, Any] = {
    "slack": {"bot_token": BOT_TOKEN, "signing_secret": SECRET, "channel": "#a", "api_url": "http://127.0.0.1:9/api/"}
}
FORM = {"content-type": "application/x-www-form-urlencoded"}


async def test_slack_s_form_callback_passes_the_json_rule_and_nothing_else(
    mesh_of: Callable[..., Mesh], client_of: Callable[[Mesh], httpx.AsyncClient]
) -> None:
    client = client_of(mesh_of(notify=SLACK))
    unsigned = await client.post("/integrations/slack/actions", content="payload={}", headers=FORM)
    assert unsigned.status_code == 401  # past the guard, refused by the signature check
    cross_site = await client.post(
        "/integrations/slack/actions",
        content="payload={}",
        headers={**FORM, "sec-fetch-site": "cross-site", "origin": "https://evil.example"},
    )
    assert cross_site.status_code == 403
    form_elsewhere = await client.post("/approvals/0123456789abcdef/approve", content="a=b", headers=FORM)
    assert form_elsewhere.status_code == 415


async def test_the_routes_are_not_found_when_their_channel_is_not_configured(
    mesh_of: Callable[..., Mesh], client_of: Callable[[Mesh], httpx.AsyncClient]
) -> None:
    client = client_of(mesh_of())
    slack = await client.post("/integrations/slack/actions", content="payload={}", headers=FORM)
    assert slack.status_code == 404 and "notify.slack" in slack.json()["error"]
    link = await client.get("/integrations/email/v1.a.b")
    assert link.status_code == 404 and "not configured" in link.text
    assert link.headers["content-type"].startswith("text/html")
