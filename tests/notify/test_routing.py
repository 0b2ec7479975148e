"""Routing and escalation: rules choose the channel by tool, agent and policy; nobody answering within a route's
`escalate_after` brings in the next route before the approval times out, exactly once across workers and across a
restart (the timer is a row in the database); a resolution anywhere, or a timeout, updates every Slack message."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flux7.shared.auth.users import UserStore
from flux7.shared.gate.approvals import Approval
from flux7.shared.mesh import Mesh
from flux7.shared.notify.routing import chain_for, recipients
from flux7.shared.notify.settings import NotifySettings, Route
from flux7.shared.settings import load_settings
from tests.support.waiting import wait_until

from .slack_standin import BOT_TOKEN, SlackStandIn, slack_standin

SECRET = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with slack_standin(SECRET) as standin:
        yield standin


def _notify(slack: SlackStandIn, routes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "slack": {"bot_token": BOT_TOKEN, "signing_secret": SECRET, "channel": "#approvals", "api_url": slack.base_url},
        "routes": routes,
    }


def _submit(mesh: Mesh, tool: str, agent: str = "bot") -> Approval:
    return mesh.approvals.submit(
        agent=agent, tool=tool, arguments={"amount": 120}, trace_id="t", policy_rule="finance", policy_version=""
    )


def _at(ts: str) -> Callable[[dict[str, Any]], bool]:
    return lambda call: bool(call["ts"] == ts)


def _posts(slack: SlackStandIn, channel: str) -> list[dict[str, Any]]:
    return [a for a in slack.called("chat.postMessage") if a["channel"] == channel]


def test_routes_choose_by_tool_agent_and_policy_and_fall_back_to_the_defaults() -> None:
    settings = NotifySettings(
        routes=(
            Route(name="finance", tools=("finance.*",), slack="#finance-approvals", email=("approvers",)),
            Route(name="prod", agents=("prod-*",), policies=("prod-*",), slack="#prod"),
        ),
    )
    assert [r.name for r in chain_for(settings, "finance.pay", "bot", "gate")] == ["finance"]
    assert [r.name for r in chain_for(settings, "fs.write", "prod-7", "prod-writes")] == ["prod"]
    assert chain_for(settings, "fs.write", "prod-7", "gate") == []  # no default channel, no default address
    default = load_settings(None, env={}, notify={"email": {"smtp_host": "h", "from": "f@x.y", "to": ["a@x.y"]}})
    assert [r.email for r in chain_for(default.notify, "fs.write", "bot", "gate")] == [("a@x.y",)]


def test_approvers_are_the_users_in_scope_with_an_email_never_the_requester(mesh_of: Callable[..., Mesh]) -> None:
    mesh = mesh_of()
    users = UserStore(mesh.db)
    users.add("fin", "approver", approve_tools=["finance.*"], email="fin@example.com")
    users.add("fin2", "approver", approve_tools=["finance.*"], email="fin2@example.com")
    users.add("ops", "approver", approve_tools=["fs.*"], email="ops@example.com")
    users.add("nomail", "approver", approve_tools=["finance.*"])
    users.add("boss", "admin", email="boss@example.com")
    route = Route(email=("approvers", "audit@example.com", "FIN@example.com"))
    call = msgspec_approval(tool="finance.pay", agent_id="bot", requester_user="fin2")
    assert recipients(route, call, users.list()) == ["fin@example.com", "audit@example.com"]
    nobody_scoped = msgspec_approval(tool="hr.fire", agent_id="bot", requester_user="")
    assert recipients(route, nobody_scoped, users.list()) == [
        "boss@example.com",
        "audit@example.com",
        "FIN@example.com",
    ]


def msgspec_approval(**fields: Any) -> Approval:
    base: dict[str, Any] = {
        "id": "0" * 16,
        "agent_id": "bot",
        "tool": "x",
        "params": {},
        "trace_id": "",
        "policy_rule": "gate",
        "status": "pending",
        "created_at": "",
        "expires_at": "",
    }
    return Approval(**{**base, **fields})


def test_nobody_answering_escalates_to_the_next_route_once_across_two_workers(
    slack: SlackStandIn, mesh_of: Callable[..., Mesh]
) -> None:
    routes = [
        {"name": "finance", "tools": ["finance.*"], "slack": "#finance-approvals", "escalate_after": "300ms"},
        {"name": "leads", "tools": ["finance.*"], "slack": "#finance-leads"},
    ]
    settings: dict[str, Any] = {"approval": {"timeout_seconds": 30}, "notify": _notify(slack, routes)}
    one, two = mesh_of(**settings), mesh_of(**settings)  # two workers over one database
    for mesh in (one, two):
        assert mesh.notifications is not None
        mesh.notifications.start()
    approval = _submit(one, "finance.pay")
    first = slack.wait_for("chat.postMessage", lambda a: a["channel"] == "#finance-approvals")
    assert approval.id in json.dumps(first["blocks"])
    escalated = slack.wait_for("chat.postMessage", lambda a: a["channel"] == "#finance-leads")
    assert "Escalated: nobody decided within 300ms (route finance)" in json.dumps(escalated["blocks"])
    assert one.approvals.get(approval.id).status == "pending"  # before it timed out
    claimed = one.db.query("SELECT step, claimed_at FROM notify_escalations WHERE approval_id = ?", (approval.id,))
    assert [(r[0], r[1] is not None) for r in claimed] == [(1, True)]
    wait_until(lambda: one.notifications and one.notifications.outbox.pending() == 0, what="the outbox drained")
    assert len(_posts(slack, "#finance-leads")) == 1  # two workers, one escalation
    # Settled anywhere (here: the other worker), every message of the approval is updated.
    two.approvals.resolve(approval.id, "deny", resolved_by="user:boss", resolver="", reasoning="not this month")
    for post in (first, escalated):
        update = slack.wait_for("chat.update", _at(post["_response"]["ts"]))
        assert "Denied by user:boss" in json.dumps(update["blocks"])


def test_an_escalation_survives_a_restart(slack: SlackStandIn, mesh_of: Callable[..., Mesh]) -> None:
    routes = [
        {"name": "first", "slack": "#first", "escalate_after": "500ms"},
        {"name": "second", "slack": "#second"},
    ]
    settings: dict[str, Any] = {"approval": {"timeout_seconds": 30}, "notify": _notify(slack, routes)}
    before = mesh_of(**settings)
    approval = _submit(before, "fs.write")
    assert before.notifications is not None
    before.notifications.stop()  # the process goes away before the escalation is due
    assert not _posts(slack, "#second")
    after = mesh_of(**settings)  # a new process over the same database
    assert after.notifications is not None
    after.notifications.start()
    escalated = slack.wait_for("chat.postMessage", lambda a: a["channel"] == "#second")
    assert approval.id in json.dumps(escalated["blocks"])


def test_an_escalation_due_after_the_deadline_is_not_scheduled_and_a_timeout_updates_the_message(
    slack: SlackStandIn, mesh_of: Callable[..., Mesh]
) -> None:
    routes = [{"slack": "#first", "escalate_after": "1h"}, {"slack": "#second"}]
    mesh = mesh_of(approval={"timeout_seconds": 0.5}, notify=_notify(slack, routes))
    approval = _submit(mesh, "fs.write")
    post = slack.wait_for("chat.postMessage", lambda a: a["channel"] == "#first")
    assert mesh.db.query("SELECT * FROM notify_escalations WHERE approval_id = ?", (approval.id,)) == []
    ts = post["_response"]["ts"]
    update = slack.wait_for("chat.update", lambda a: a["ts"] == ts)  # nobody looked: Slack's worker swept it
    assert "Timed out" in json.dumps(update["blocks"])
    assert mesh.approvals.get(approval.id).resolved_by == "system:timeout"
