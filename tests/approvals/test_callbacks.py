"""Approval notifications (CONTRACT 1.8): the operator webhook and the agent callback with its SSRF guard."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from shared.callbacks import CallbackRefused, Notifier, resolve_public
from shared.mesh import Mesh
from tests.support.http import serve_json, wait_until


def fake_dns(*addresses: str) -> Callable[..., Any]:
    """A resolver answering fixed records, to check the guard's reading of what DNS returns."""

    def resolve(host: str, port: int, **_: Any) -> list[Any]:
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses
        ]

    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/cb",
        "http://localhost/cb",
        "http://api.localhost/cb",
        "http://[::1]/cb",
        "http://10.1.2.3/cb",
        "http://192.168.0.10/cb",
        "http://172.16.5.5/cb",
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]/cb",
        "http://[::ffff:127.0.0.1]/cb",
        "http://0.0.0.0/cb",
        "ftp://example.com/cb",
        "http:///cb",
    ],
)
def test_the_guard_refuses_local_private_and_link_local_targets(url: str) -> None:
    with pytest.raises(CallbackRefused):
        resolve_public(url)


def test_the_guard_checks_every_resolved_address_not_the_name() -> None:
    assert resolve_public("https://hooks.example.com/x", resolver=fake_dns("93.184.216.34")) == "93.184.216.34"
    with pytest.raises(CallbackRefused, match="private"):
        resolve_public("https://hooks.example.com/x", resolver=fake_dns("93.184.216.34", "10.0.0.7"))
    with pytest.raises(CallbackRefused, match="loopback"):
        resolve_public("https://rebind.example.com/x", resolver=fake_dns("127.0.0.1"))


def test_a_public_address_literal_passes_the_guard() -> None:
    assert resolve_public("http://93.184.216.34:8080/cb") == "93.184.216.34"


def test_a_callback_to_loopback_is_refused_and_never_reaches_the_server() -> None:
    notifier = Notifier(timeout=2)
    with serve_json(lambda *_: (200, {})) as (base, seen):
        delivery = notifier.deliver(f"{base}/cb", {"event": "approved"}, guard=True)
    notifier.close()
    assert delivery.outcome.startswith("refused: ") and "loopback" in delivery.outcome
    assert seen == []


def test_the_operator_webhook_hears_each_new_approval(mesh_of: Callable[..., Mesh]) -> None:
    with serve_json(lambda *_: (204, b"")) as (base, seen):
        mesh = mesh_of(approval={"notify_url": f"{base}/hook"})
        a = mesh.approvals.submit(
            agent="bot", tool="fs.write", arguments={"p": 1}, trace_id="t", policy_rule="gate", policy_version=""
        )
        wait_until(lambda: len(seen) == 1, timeout=10)
    body = json.loads(seen[0]["body"])
    assert seen[0]["path"] == "/hook"
    assert body["event"] == "pending" and body["id"] == a.id
    assert {k: body[k] for k in ("agent_id", "tool", "params", "policy_rule")} == {
        "agent_id": "bot",
        "tool": "fs.write",
        "params": {"p": 1},
        "policy_rule": "gate",
    }
    assert body["timestamp"].endswith("Z")


def test_a_resolution_calls_back_through_the_guard(mesh: Mesh) -> None:
    with serve_json(lambda *_: (200, {})) as (base, seen):
        a = mesh.approvals.submit(
            agent="bot",
            tool="fs.write",
            arguments={},
            trace_id="t",
            policy_rule="gate",
            policy_version="",
            callback_url=f"{base}/cb",
        )
        mesh.approvals.resolve(a.id, "approve", resolver="", resolved_by="human")
        notifier = mesh.approvals.notifier
        assert notifier is not None
        delivery = notifier.wait_for(lambda d: d.url == f"{base}/cb", timeout=10)
    assert delivery is not None and delivery.event == "approved"
    assert delivery.outcome.startswith("refused: ")
    assert seen == []
