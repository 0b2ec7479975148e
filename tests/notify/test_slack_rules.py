"""A Slack click is a decision under the clicking user's own rules, as on every other route: four eyes counts each
person once and shows the count on the message, and nobody decides a call made on their own behalf. In process:
the interaction core gets the bytes and headers Slack would send, signed by the stand-in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from flux7.shared.auth.users import UserStore
from flux7.shared.errors import Unauthorized
from flux7.shared.mesh import Mesh

from .slack_standin import BOT_TOKEN, SlackStandIn, block_action, slack_standin

SECRET = "fedcba9876543210fedcba9876543210"


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    with slack_standin(SECRET) as standin:
        yield standin


@pytest.fixture
def mesh(slack: SlackStandIn, mesh_of: Callable[..., Mesh]) -> Mesh:
    m = mesh_of(
        notify={
            "slack": {
                "bot_token": BOT_TOKEN,
                "signing_secret": SECRET,
                "channel": "#approvals",
                "api_url": slack.base_url,
                "users": {"U_ANN": "ann", "U_BEN": "ben", "U_CY": "cy"},
            }
        }
    )
    users = UserStore(m.db)
    for name in ("ann", "ben", "cy"):
        users.add(name, "approver", approve_tools=["pay.*"])
    return m


def _click(mesh: Mesh, slack: SlackStandIn, user: str, action: str, approval_id: str) -> None:
    body = urlencode({"payload": json.dumps(block_action(user, action, approval_id, "CAPPROVALS", "1.1"))})
    assert mesh.notifications is not None
    mesh.notifications.interactions.handle(body.encode(), slack.signed(body))


def _submit(mesh: Mesh, **extra: Any) -> str:
    return mesh.approvals.submit(
        agent="payer",
        tool="pay.send",
        arguments={"eur": 9000},
        trace_id="t",
        policy_rule="gate",
        policy_version="",
        **extra,
    ).id


def test_four_eyes_from_slack_counts_each_person_once_and_shows_the_count(mesh: Mesh, slack: SlackStandIn) -> None:
    approval_id = _submit(mesh, required_approvals=2)
    post = slack.wait_for("chat.postMessage")
    ts = post["_response"]["ts"]
    _click(mesh, slack, "U_ANN", "flux7_approve", approval_id)
    _click(mesh, slack, "U_ANN", "flux7_approve", approval_id)  # the same person again: still one vote
    assert mesh.approvals.get(approval_id).status == "pending"
    progress = slack.wait_for("chat.update", lambda a: "1 of 2 approvals so far: user:ann" in json.dumps(a["blocks"]))
    assert progress["ts"] == ts
    assert any(b["type"] == "actions" for b in progress["blocks"])  # the others can still decide here
    _click(mesh, slack, "U_BEN", "flux7_approve", approval_id)
    settled = mesh.approvals.get(approval_id)
    assert settled.status == "approved" and settled.resolved_by == "user:ben"
    assert [v.actor for v in settled.votes] == ["user:ann", "user:ben"]
    final = slack.wait_for("chat.update", lambda a: "Approved by user:ben" in json.dumps(a["blocks"]))
    assert all(b["type"] != "actions" for b in final["blocks"])


def test_nobody_decides_from_slack_a_call_made_on_their_own_behalf(mesh: Mesh, slack: SlackStandIn) -> None:
    approval_id = _submit(mesh, requester_user="cy")
    slack.wait_for("chat.postMessage")
    _click(mesh, slack, "U_CY", "flux7_approve", approval_id)
    told = slack.wait_for("chat.postEphemeral", lambda a: a["user"] == "U_CY")
    assert "cannot decide a call made on their own behalf" in told["text"]
    assert mesh.approvals.get(approval_id).status == "pending"
    _click(mesh, slack, "U_ANN", "flux7_deny", approval_id)
    assert mesh.approvals.get(approval_id).resolved_by == "user:ann"
    _click(mesh, slack, "U_BEN", "flux7_approve", approval_id)  # too late: told so, privately
    late = slack.wait_for("chat.postEphemeral", lambda a: a["user"] == "U_BEN")
    assert "approval already resolved" in late["text"]


def test_nothing_is_read_from_an_interaction_that_slack_did_not_sign(mesh: Mesh, slack: SlackStandIn) -> None:
    approval_id = _submit(mesh)
    body = urlencode({"payload": json.dumps(block_action("U_ANN", "flux7_approve", approval_id, "C1", "1.1"))})
    assert mesh.notifications is not None
    headers = slack.signed(body)
    for forged in (
        {**headers, "x-slack-signature": "v0=" + "0" * 64},
        {**headers, "x-slack-request-timestamp": "not-a-number"},
        {k: v for k, v in headers.items() if k != "x-slack-signature"},
    ):
        with pytest.raises(Unauthorized):
            mesh.notifications.interactions.handle(body.encode(), forged)
    with pytest.raises(Unauthorized):  # a signed body, altered after signing
        mesh.notifications.interactions.handle(body.replace("U_ANN", "U_BEN").encode(), headers)
    assert mesh.approvals.get(approval_id).status == "pending"
