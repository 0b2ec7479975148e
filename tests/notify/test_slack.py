"""Slack end to end: a real flux7 server process and a Slack Web API stand-in on loopback. A call held for a human
is posted with its buttons; a click that Slack signed decides it as the mapped flux7 user, under that user's
rules; the message is updated with the outcome; anything unsigned, stale, unmapped or out of scope is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flux7.shared.auth.users import UserStore
from flux7.shared.store.db import Database
from tests.gate.servers import Server, blocked_call, write_config

from .slack_standin import BOT_TOKEN, SlackStandIn, block_action, slack_standin, view_submission

pytestmark = pytest.mark.served  # some tests start `flux7 serve`

SECRET = "8f14e45fceea167a5a36dedd4bea2543"


class Setup:
    def __init__(self, server: Server, slack: SlackStandIn, tokens: dict[str, str]) -> None:
        self.server = server
        self.slack = slack
        self.tokens = tokens
        self.url = server.url


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("slack")
    with slack_standin(SECRET) as slack:
        slack.emails.update(
            {"U_BOB": "Bob@Example.com", "U_CAROL": "carol@example.com", "U_NOBODY": "nobody@example.com"}
        )
        db = Database(tmp / "flux7.db")
        users = UserStore(db)
        tokens = {
            "alice": users.add("alice", "approver", approve_tools=["echo.*"]).token,
            "bob": users.add("bob", "approver", approve_tools=["echo.*"], email="bob@example.com").token,
            "carol": users.add("carol", "approver", approve_tools=["finance.*"], email="carol@example.com").token,
        }
        db.close()
        server = Server(tmp / "config.yaml", workers=1)
        write_config(
            tmp,
            approval={"timeout_seconds": 60},
            notify={
                "public_url": server.url,
                "slack": {
                    "bot_token": BOT_TOKEN,
                    "signing_secret": SECRET,
                    "channel": "#approvals",
                    "api_url": slack.base_url,
                    "users": {"U_ALICE": "alice"},
                },
            },
        )
        server.start()
        try:
            yield Setup(server, slack, tokens)
        finally:
            server.stop()


def _posted(slack: SlackStandIn, arg: str) -> tuple[str, dict[str, Any], str, str]:
    """The approval id, the message and where it landed (channel id, ts) of the post for the call `echo <arg>`."""
    message = slack.wait_for("chat.postMessage", lambda a: arg in json.dumps(a.get("blocks")))
    approval_id = next(b for b in message["blocks"] if b["type"] == "actions")["elements"][0]["value"]
    return approval_id, message, message["_response"]["channel"], message["_response"]["ts"]


def _decide(setup: Setup, approval_id: str, decision: str, user: str) -> None:
    """Decide on the REST route with a user's personal token (elsewhere than Slack)."""
    answer = httpx.post(
        f"{setup.url}/approvals/{approval_id}/{decision}", headers={"Authorization": f"Bearer {setup.tokens[user]}"}
    )
    assert answer.status_code == 200, answer.text


def _texts(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_a_pending_call_is_posted_with_its_arguments_deadline_and_buttons(setup: Setup) -> None:
    call = blocked_call(setup.url, "show-me")
    approval_id, message, _, _ = _posted(setup.slack, "show-me")
    text = _texts(message["blocks"])
    assert message["channel"] == "#approvals"
    assert "Approval needed: echo.run" in text
    assert "`bot`" in text and "`echo.run`" in text and "show-me" in text
    assert "<!date^" in text  # the deadline, in each reader's own time zone
    assert "Precedents:" in text
    actions = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    assert [a["action_id"] for a in actions] == ["flux7_approve", "flux7_deny", "flux7_deny_reason"]
    assert f"{setup.url}/console/#/approvals/{approval_id}" in text
    httpx.post(
        f"{setup.url}/approvals/{approval_id}/deny", headers={"Authorization": f"Bearer {setup.tokens['alice']}"}
    )
    assert call.result(30).status_code == 403


def test_approve_from_slack_releases_the_call_as_the_mapped_user_and_updates_the_message(setup: Setup) -> None:
    call = blocked_call(setup.url, "approve-me")
    approval_id, _, channel, ts = _posted(setup.slack, "approve-me")
    answer = setup.slack.interact(setup.url, block_action("U_ALICE", "flux7_approve", approval_id, channel, ts))
    assert answer.status_code == 200
    response = call.result(30)
    assert response.status_code == 200, response.text
    approval = httpx.get(f"{setup.url}/approvals/{approval_id}").json()
    assert approval["status"] == "approved"
    assert approval["resolved_by"] == "user:alice"
    assert approval["resolver_kind"] == "human"
    update = setup.slack.wait_for("chat.update", lambda a: a["ts"] == ts)
    assert update["channel"] == channel
    assert "Approved by user:alice" in _texts(update["blocks"])
    assert all(b["type"] != "actions" for b in update["blocks"])  # no buttons on a settled approval


def test_deny_with_a_reason_from_slack_tells_the_agent_the_reason(setup: Setup) -> None:
    call = blocked_call(setup.url, "deny-me")
    approval_id, _, channel, ts = _posted(setup.slack, "deny-me")
    # Bob is not in the explicit map: Slack's users.info gives his email, which is flux7 user bob's.
    answer = setup.slack.interact(setup.url, block_action("U_BOB", "flux7_deny_reason", approval_id, channel, ts))
    assert answer.status_code == 200
    opened = setup.slack.wait_for("views.open", lambda a: a["trigger_id"] == "trigger-U_BOB-flux7_deny_reason")
    view = opened["view"]
    assert view["type"] == "modal" and approval_id in view["private_metadata"]
    answer = setup.slack.interact(setup.url, view_submission("U_BOB", view, "too risky on a Friday"))
    assert answer.status_code == 200 and answer.content == b""  # an empty 200 closes the modal
    response = call.result(30)
    assert response.status_code == 403
    assert response.json()["error"] == "approval denied by user:bob: too risky on a Friday"
    update = setup.slack.wait_for("chat.update", lambda a: a["ts"] == ts)
    text = _texts(update["blocks"])
    assert "Denied by user:bob" in text and "too risky on a Friday" in text


def test_a_forged_signature_and_a_stale_timestamp_are_refused(setup: Setup) -> None:
    call = blocked_call(setup.url, "forge-me")
    approval_id, _, channel, ts = _posted(setup.slack, "forge-me")
    click = block_action("U_ALICE", "flux7_approve", approval_id, channel, ts)
    forged = setup.slack.interact(setup.url, click, secret="not-the-signing-secret")
    stale = setup.slack.interact(setup.url, click, timestamp=int(time.time()) - 600)
    assert (forged.status_code, stale.status_code) == (401, 401)
    assert forged.json()["error"] == "invalid Slack signature or stale timestamp"
    unsigned = httpx.post(
        f"{setup.url}/integrations/slack/actions",
        content="payload=" + json.dumps(click),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert unsigned.status_code == 401
    assert httpx.get(f"{setup.url}/approvals/{approval_id}").json()["status"] == "pending"
    httpx.post(
        f"{setup.url}/approvals/{approval_id}/deny", headers={"Authorization": f"Bearer {setup.tokens['alice']}"}
    )
    assert call.result(30).status_code == 403


def test_an_unmapped_and_an_out_of_scope_slack_user_are_refused_and_told_so(setup: Setup) -> None:
    call = blocked_call(setup.url, "scope-me")
    approval_id, _, channel, ts = _posted(setup.slack, "scope-me")
    for user in ("U_NOBODY", "U_CAROL"):
        answer = setup.slack.interact(setup.url, block_action(user, "flux7_approve", approval_id, channel, ts))
        assert answer.status_code == 200
    nobody = setup.slack.wait_for("chat.postEphemeral", lambda a: a["user"] == "U_NOBODY")
    carol = setup.slack.wait_for("chat.postEphemeral", lambda a: a["user"] == "U_CAROL")
    assert nobody["channel"] == channel and "not a flux7 user" in nobody["text"]
    assert "user:carol (approver) may not decide echo.run for bot: outside your scope" in carol["text"]
    # A modal's reason from someone out of scope is refused in the modal itself.
    view = {"callback_id": "flux7_deny_reason", "private_metadata": json.dumps({"a": approval_id, "c": channel})}
    refused = setup.slack.interact(setup.url, view_submission("U_CAROL", view, "no"))
    assert refused.json()["response_action"] == "errors"
    assert "outside your scope" in refused.json()["errors"]["reason"]
    assert httpx.get(f"{setup.url}/approvals/{approval_id}").json()["status"] == "pending"
    httpx.post(
        f"{setup.url}/approvals/{approval_id}/approve", headers={"Authorization": f"Bearer {setup.tokens['bob']}"}
    )
    assert call.result(30).status_code == 200
    update = setup.slack.wait_for("chat.update", lambda a: a["ts"] == ts)  # settled elsewhere: updated too
    assert "Approved by user:bob" in _texts(update["blocks"])
