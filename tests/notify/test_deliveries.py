"""A delivery that fails for good is not lost from sight: `GET /notifications/deliveries` lists it with its last
error, the `agent_mesh_notify_deliveries` gauge counts it, and an admin queues it again once the receiver is fixed
(`POST /notifications/deliveries/{seq}/retry`), recorded as an event. In process: a Mesh over a real SQLite file
(PostgreSQL with `--engine=postgresql`), the Litestar app through its test client, a real webhook receiver on
loopback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from tests.support.http import serve_json
from tests.support.waiting import wait_until

ADMIN = {"Authorization": "Bearer admin-tok"}


def _gauge(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["lane"], s.labels["status"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name == "agent_mesh_notify_deliveries"
        for s in f.samples
    }


def test_a_given_up_delivery_is_listed_counted_and_retried_once_the_receiver_is_fixed(
    mesh_of: Callable[..., Mesh],
) -> None:
    state = {"status": 500}

    def receiver(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        return state["status"], b""

    with serve_json(receiver) as (base, seen):
        mesh = mesh_of(
            approval={"notify_url": f"{base}/hook", "timeout_seconds": 120},
            notify={"max_attempts": 2, "retry_max_seconds": 0.5},
            auth={"admin_token": "admin-tok"},
        )
        viewer = mesh.users.add("vera", "viewer").token
        with TestClient(create_app(mesh)) as http:
            a = mesh.approvals.submit(
                agent="bot", tool="fs.write", arguments={"p": 1}, trace_id="t", policy_rule="gate", policy_version=""
            )
            wait_until(lambda: bool(mesh.notifications and mesh.notifications.outbox.rows(status="failed")), 20)
            assert len(seen) == 2  # notify.max_attempts, then given up

            listed = http.get("/notifications/deliveries", params={"status": "failed"}, headers=ADMIN).json()
            assert listed["lanes"] == ["webhook"]
            [failed] = listed["deliveries"]
            assert failed["lane"] == "webhook" and failed["kind"] == "webhook" and failed["approval_id"] == a.id
            assert failed["attempts"] == 2 and "500" in failed["last_error"] and failed["next_attempt_at"] is None
            queued = http.get("/notifications/deliveries", params={"status": "queued"}, headers=ADMIN).json()
            assert queued["deliveries"] == []
            as_viewer = {"Authorization": f"Bearer {viewer}"}
            assert http.get("/notifications/deliveries", headers=as_viewer).status_code == 200  # viewers read
            gauge = _gauge(http.get("/metrics", headers=ADMIN).text)
            assert gauge[("webhook", "failed")] == 1 and gauge[("webhook", "queued")] == 0

            seq = failed["seq"]
            refused = http.post(f"/notifications/deliveries/{seq}/retry", headers=as_viewer)
            assert refused.status_code == 403, refused.text  # …admins act
            state["status"] = 204
            again = http.post(f"/notifications/deliveries/{seq}/retry", headers=ADMIN)
            assert again.status_code == 200 and again.json()["status"] == "queued" and again.json()["attempts"] == 0
            wait_until(lambda: len(seen) == 3 and not mesh.notifications.outbox.rows(), 20, what="the retry")  # type: ignore[union-attr]
            assert seen[2]["headers"]["webhook-id"] == seen[0]["headers"]["webhook-id"]  # the same message
            assert _gauge(http.get("/metrics", headers=ADMIN).text)[("webhook", "failed")] == 0

            gone = http.post(f"/notifications/deliveries/{seq}/retry", headers=ADMIN)
            assert gone.status_code == 404 and "no failed delivery" in gone.json()["error"]
            [event] = http.get("/traces", params={"tool": "mesh.notify_retry"}, headers=ADMIN).json()
            assert event["user_id"] == "owner:admin-token" and event["params"]["seq"] == seq
            bad = http.get("/notifications/deliveries", params={"status": "lost"}, headers=ADMIN)
            assert bad.status_code == 400 and "queued, failed" in bad.json()["error"]


def test_without_notifications_the_list_is_empty_a_retry_404_and_the_gauge_absent(mesh_of: Callable[..., Mesh]) -> None:
    mesh = mesh_of(auth={"admin_token": "admin-tok"})
    with TestClient(create_app(mesh)) as http:
        r = http.get("/notifications/deliveries", headers=ADMIN)
        assert r.status_code == 200 and r.json() == {"lanes": [], "deliveries": []}
        retry = http.post("/notifications/deliveries/1/retry", headers=ADMIN)
        assert retry.status_code == 404 and "no notifications are configured" in retry.json()["error"]
        assert http.get("/notifications/deliveries").status_code == 401
        metrics: Any = http.get("/metrics", headers=ADMIN).text
        assert "agent_mesh_notify_deliveries" not in metrics
