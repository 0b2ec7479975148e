"""The operator's webhook (`approval.notify_url`) signed per Standard Webhooks, verified here with the reference
library (`standardwebhooks`), retried from the durable outbox with backoff, in order, across a kill -9 of flux7."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from flux7.shared.mesh import Mesh
from flux7.shared.notify.keys import WEBHOOK_SECRET_FILE, new_webhook_secret
from tests.gate.servers import Server, blocked_call, pending, write_config
from tests.support.http import serve_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.served  # some tests start `flux7 serve`


def _verified(secret: str, request: dict[str, Any]) -> dict[str, Any]:
    """The body, once the reference implementation accepts its signature (it raises otherwise)."""
    headers = {k: v for k, v in request["headers"].items() if k.startswith("webhook-")}
    body: dict[str, Any] = Webhook(secret).verify(request["body"], headers)
    return body


def test_a_delivery_is_signed_with_the_configured_secret(mesh_of: Callable[..., Mesh]) -> None:
    secret = new_webhook_secret()
    with serve_json(lambda *_: (204, b"")) as (base, seen):
        mesh = mesh_of(approval={"notify_url": f"{base}/hook", "notify_secret": secret})
        a = mesh.approvals.submit(
            agent="bot", tool="fs.write", arguments={"p": 1}, trace_id="t", policy_rule="gate", policy_version=""
        )
        wait_until(lambda: len(seen) == 1, timeout=10)
    body = _verified(secret, seen[0])
    assert body["event"] == "pending" and body["id"] == a.id
    assert seen[0]["headers"]["webhook-id"] == f"msg_{a.id}_pending"
    assert seen[0]["headers"]["webhook-signature"].startswith("v1,")
    forged = dict(seen[0], body=seen[0]["body"].replace(b'"fs.write"', b'"fs.read!"'))
    try:
        _verified(secret, forged)
    except Exception as e:
        assert "signature" in str(e).lower()
    else:
        raise AssertionError("a changed body verified")


def test_retries_after_failures_keep_their_order_across_a_restart(tmp_path: Path, servers: list[Any]) -> None:
    state = {"mode": "fail"}
    in_flight, release = threading.Event(), threading.Event()

    def receiver(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        if state["mode"] == "hold":  # the service is killed while this delivery waits for its answer
            in_flight.set()
            release.wait(60)
        return (204, b"") if state["mode"] == "accept" else (500, b"")

    with serve_json(receiver) as (base, seen):
        config = write_config(
            tmp_path,
            approval={"timeout_seconds": 120, "notify_url": f"{base}/hook"},
            notify={"retry_max_seconds": 0.5},
        )
        server = Server(config, workers=2)
        servers.append(server.start())
        ids: list[str] = []
        for n in range(3):
            blocked_call(server.url, f"hook-{n}")
            ids.append(next(a["id"] for a in pending(server.url, n + 1) if f"hook-{n}" in json.dumps(a["params"])))
        wait_until(lambda: len(seen) >= 3, timeout=20, what="three failed attempts")
        secret = (tmp_path / WEBHOOK_SECRET_FILE).read_text().strip()
        failed = list(seen)
        # In order: the first message is retried, and nothing overtakes it while it fails.
        assert {r["headers"]["webhook-id"] for r in failed} == {f"msg_{ids[0]}_pending"}
        assert all(_verified(secret, r)["id"] == ids[0] for r in failed)
        state["mode"] = "hold"
        wait_until(in_flight.is_set, timeout=20, what="a delivery in flight")
        server.kill9()  # mid-delivery: the dead worker's lease on the first message is left behind
        state["mode"] = "accept"
        attempts_before_restart = len(seen)
        release.set()
        server.start()  # a new process over the same database: the outbox says what is still owed

        def accepted() -> list[dict[str, Any]]:
            return [r for r in seen[attempts_before_restart:]]

        # Well within the 120 s lease: the new workers see its holder is gone and take the message over at once.
        wait_until(lambda: len({r["headers"]["webhook-id"] for r in accepted()}) >= 3, timeout=30, what="3 deliveries")
        delivered = [_verified(secret, r)["id"] for r in accepted()]
        # At least once, in order: the message the killed worker was sending comes first.
        assert list(dict.fromkeys(delivered)) == ids
        assert [r["headers"]["webhook-id"] for r in accepted()][-1] == f"msg_{ids[2]}_pending"
        assert httpx.get(f"{server.url}/health").status_code == 200
