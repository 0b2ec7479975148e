"""Approval notifications (CONTRACT 1.8): the operator webhook and the agent callback through the outbound guard."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from flux7.shared.gate.callbacks import Notifier
from flux7.shared.mesh import Mesh
from flux7.shared.outbound import OutboundGuard
from tests.support.http import serve_json, wait_until


def test_a_callback_to_loopback_is_refused_and_never_reaches_the_server(caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier(timeout=2)
    with serve_json(lambda *_: (200, {})) as (base, seen), caplog.at_level(logging.WARNING, "flux7.callbacks"):
        delivery = notifier.deliver(f"{base}/cb", {"event": "approved"}, guard=True)
    notifier.close()
    assert (
        delivery.outcome.startswith("refused: ") and "127.0.0.1 is not globally routable (loopback)" in delivery.outcome
    )
    assert seen == []
    assert f"callback to {base}/cb refused: 127.0.0.1 is not globally routable (loopback)" in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        "http://100.100.100.200/latest/meta-data",
        "http://[2002:7f00:1::]:9/cb",
        "http://[::ffff:127.0.0.1]:9/cb",
        "http://[64:ff9b::7f00:1]:9/cb",
        "http://0x7f.1:9/cb",
        "http://2130706433:9/cb",
        "http://localhost:9/cb",
        "ftp://example.com/cb",
    ],
)
def test_a_callback_to_any_form_of_a_refused_address_is_refused(url: str) -> None:
    notifier = Notifier(timeout=2)
    delivery = notifier.deliver(url, {"event": "approved"}, guard=True)
    notifier.close()
    assert delivery.outcome.startswith("refused: "), delivery.outcome


def test_an_allowed_network_lets_a_callback_reach_a_loopback_receiver() -> None:
    notifier = Notifier(guard=OutboundGuard(allow_networks=["127.0.0.1/32"]), timeout=2)
    with serve_json(lambda *_: (202, {})) as (base, seen):
        delivery = notifier.deliver(f"{base}/cb", {"event": "approved", "id": "a1"}, guard=True)
    notifier.close()
    assert delivery.outcome == "delivered 202"
    assert json.loads(seen[0]["body"]) == {"event": "approved", "id": "a1"}


def test_a_callback_redirected_to_a_refused_address_is_refused() -> None:
    notifier = Notifier(guard=OutboundGuard(allow_networks=["127.0.0.2/32"]), timeout=2)
    with serve_json(lambda *_: (204, b"")) as (inside, reached):
        redirect = (307, b"", {"location": f"{inside}/steal"})
        with serve_json(lambda *_: redirect, host="127.0.0.2") as (base, _):
            delivery = notifier.deliver(f"{base}/cb", {"event": "approved"}, guard=True)
    notifier.close()
    assert delivery.outcome == f"refused: redirect to {inside}/steal: 127.0.0.1 is not globally routable (loopback)"
    assert reached == []


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


def test_with_loopback_allowed_a_resolution_calls_back_the_receiver(mesh_of: Callable[..., Mesh]) -> None:
    mesh = mesh_of(outbound={"allow_networks": ["127.0.0.1/32"]})
    with serve_json(lambda *_: (200, {})) as (base, seen):
        a = mesh.approvals.submit(
            agent="bot",
            tool="fs.write",
            arguments={"p": 2},
            trace_id="t",
            policy_rule="gate",
            policy_version="",
            callback_url=f"{base}/cb",
        )
        mesh.approvals.resolve(a.id, "approve", resolved_by="human", resolver="")
        wait_until(lambda: len(seen) == 1, timeout=10)
    body = json.loads(seen[0]["body"])
    assert body["event"] == "approved" and body["id"] == a.id and body["resolved_by"] == "human"
