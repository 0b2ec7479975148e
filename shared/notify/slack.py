"""Slack: post pending approvals, take decisions from the buttons, update the message when the approval is settled.

Outgoing calls use the official SDK's `WebClient` (base URL `notify.slack.api_url`); incoming interactions
(`POST /integrations/slack/actions`) are verified with its `SignatureVerifier` (HMAC-SHA256 of
`v0:<timestamp>:<body>` under the signing secret, compared in constant time, the timestamp within five minutes)
before anything in them is read. The person who clicked is a flux7 user: `notify.slack.users` maps Slack ids to
user names, and anyone else is matched by the email address Slack has for them (users.info) against the users'
emails. Their decision goes through `ApprovalQueue.resolve` under their own principal (`user:<name>`): scope,
four eyes and "never on your own behalf" hold as on every other route. A refusal is told to that person alone
(an ephemeral message, or the modal's error)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

import msgspec
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.signature import SignatureVerifier

from flux7.shared.auth.identity import Principal, user_principal
from flux7.shared.auth.users import UserStore
from flux7.shared.errors import Flux7Error, NotFound, Unauthorized
from flux7.shared.notify.settings import SlackSettings
from flux7.shared.notify.slack_blocks import (
    ACTION_APPROVE,
    ACTION_DENY,
    ACTION_DENY_REASON,
    REASON_BLOCK,
    REASON_INPUT,
    REASON_VIEW,
    deny_reason_modal,
)

__all__ = ["SlackAnswer", "SlackClient", "SlackInteractions"]

log = logging.getLogger("flux7.notify.slack")

_EMAIL_CACHE_SECONDS = 600.0


class SlackAnswer(msgspec.Struct, frozen=True):
    """What the interaction endpoint answers Slack: 200 with an empty body, or a modal's errors as JSON."""

    body: dict[str, Any] | None = None


class SlackClient:
    """The Web API methods flux7 uses, over the SDK's WebClient."""

    def __init__(self, settings: SlackSettings) -> None:
        base = settings.api_url if settings.api_url.endswith("/") else settings.api_url + "/"
        self.web = WebClient(token=settings.bot_token, base_url=base, timeout=int(max(1, settings.timeout_seconds)))

    def post(self, channel: str, message: dict[str, Any]) -> tuple[str, str]:
        """(channel id, ts) of the message posted."""
        response = self.web.chat_postMessage(channel=channel, text=message["text"], blocks=message["blocks"])
        return str(response["channel"]), str(response["ts"])

    def update(self, channel: str, ts: str, message: dict[str, Any]) -> None:
        self.web.chat_update(channel=channel, ts=ts, text=message["text"], blocks=message["blocks"])

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        try:
            self.web.chat_postEphemeral(channel=channel, user=user, text=text)
        except SlackClientError as e:
            log.warning("could not tell Slack user %s (%s): %s", user, text, e)

    def open_view(self, trigger_id: str, view: dict[str, Any]) -> None:
        self.web.views_open(trigger_id=trigger_id, view=view)

    def email_of(self, user: str) -> str:
        response = self.web.users_info(user=user)
        profile = (response.get("user") or {}).get("profile") or {}
        return str(profile.get("email") or "")


def retryable(error: Exception) -> bool:
    """Whether a failed Web API call may succeed later: rate limits, Slack's own faults, the network."""
    if isinstance(error, SlackApiError):
        status = getattr(error.response, "status_code", 200)
        return status == 429 or status >= 500
    return True


class SlackInteractions:
    """The interaction endpoint's core: verify, find the person, resolve, tell them."""

    def __init__(
        self,
        settings: SlackSettings,
        client: SlackClient,
        users: UserStore,
        approvals: Any,
        on_vote: Callable[[Any], None],
    ) -> None:
        self._settings = settings
        self._client = client
        self._users = users
        self._approvals = approvals
        self._on_vote = on_vote  # a four-eyes vote that did not settle the approval: its messages show the count
        self._verifier = SignatureVerifier(settings.signing_secret)
        self._emails: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    # -- the request ------------------------------------------------------------------------------------------

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        try:
            valid = self._verifier.is_valid(
                body=body.decode("utf-8"),
                timestamp=headers.get("x-slack-request-timestamp"),
                signature=headers.get("x-slack-signature"),
            )
        except (ValueError, UnicodeDecodeError):
            valid = False
        if not valid:
            raise Unauthorized("invalid Slack signature or stale timestamp")

    def handle(self, body: bytes, headers: Mapping[str, str]) -> SlackAnswer:
        """One interaction callback. Unauthorized (401) unless Slack signed it within the last five minutes."""
        self.verify(body, headers)
        try:
            payload = msgspec.json.decode(parse_qs(body.decode("utf-8")).get("payload", ["{}"])[0])
        except (msgspec.DecodeError, UnicodeDecodeError):
            return SlackAnswer()
        if not isinstance(payload, dict):
            return SlackAnswer()
        kind = payload.get("type")
        if kind == "block_actions":
            self._on_action(payload)
        elif kind == "view_submission" and (payload.get("view") or {}).get("callback_id") == REASON_VIEW:
            return self._on_reason(payload)
        return SlackAnswer()

    def _on_action(self, payload: dict[str, Any]) -> None:
        actions = payload.get("actions") or []
        if not actions or not isinstance(actions[0], dict):
            return
        action_id, approval_id = str(actions[0].get("action_id", "")), str(actions[0].get("value", ""))
        if action_id not in (ACTION_APPROVE, ACTION_DENY, ACTION_DENY_REASON):
            return
        slack_user = str((payload.get("user") or {}).get("id", ""))
        channel = str(
            (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id", "")
        )
        principal, refusal = self._decider(slack_user, approval_id)
        if principal is None:
            self._client.ephemeral(channel, slack_user, refusal)
            return
        if action_id == ACTION_DENY_REASON:
            approval = self._approvals.get(approval_id)
            metadata = msgspec.json.encode({"a": approval.id, "c": channel}).decode()
            try:
                self._client.open_view(
                    str(payload.get("trigger_id", "")), deny_reason_modal(approval.id, approval.tool, metadata)
                )
            except SlackClientError as e:
                log.warning("views.open failed for approval %s: %s", approval.id, e)
                self._client.ephemeral(channel, slack_user, "Could not open the reason dialog; deny from the console.")
            return
        refusal = self._resolve(
            principal, slack_user, approval_id, "approve" if action_id == ACTION_APPROVE else "deny"
        )
        if refusal:
            self._client.ephemeral(channel, slack_user, refusal)

    def _on_reason(self, payload: dict[str, Any]) -> SlackAnswer:
        view = payload.get("view") or {}
        try:
            meta = msgspec.json.decode(str(view.get("private_metadata", "")))
            approval_id = str(meta["a"])
        except (msgspec.DecodeError, KeyError, TypeError):
            return SlackAnswer()
        values = ((view.get("state") or {}).get("values") or {}).get(REASON_BLOCK) or {}
        reason = str((values.get(REASON_INPUT) or {}).get("value") or "").strip()
        slack_user = str((payload.get("user") or {}).get("id", ""))
        principal, refusal = self._decider(slack_user, approval_id)
        if principal is not None:
            refusal = self._resolve(principal, slack_user, approval_id, "deny", reason)
        if refusal:
            return SlackAnswer({"response_action": "errors", "errors": {REASON_BLOCK: refusal[:150]}})
        return SlackAnswer()

    # -- who clicked, and may they ------------------------------------------------------------------------------

    def user_name(self, slack_user: str) -> str:
        """The flux7 user a Slack user is: the explicit map, else the user whose email Slack has for them."""
        mapped = self._settings.users.get(slack_user)
        if mapped:
            return mapped
        email = self._email(slack_user)
        if not email:
            return ""
        matches = [u.name for u in self._users.list() if u.email and u.email.lower() == email.lower()]
        return matches[0] if len(matches) == 1 else ""

    def _email(self, slack_user: str) -> str:
        now = time.monotonic()
        with self._lock:
            cached = self._emails.get(slack_user)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            email = self._client.email_of(slack_user)
        except SlackClientError as e:
            log.warning("users.info failed for %s: %s", slack_user, e)
            return ""
        with self._lock:
            self._emails[slack_user] = (now + _EMAIL_CACHE_SECONDS, email)
        return email

    def _decider(self, slack_user: str, approval_id: str) -> tuple[Principal | None, str]:
        """The principal this Slack user decides as, or (None, why not) in words for them."""
        if not slack_user:
            return None, "Slack did not say who you are."
        name = self.user_name(slack_user)
        if not name:
            return None, (
                "You are not a flux7 user: your Slack account is not mapped to one (notify.slack.users) and its "
                "email matches no flux7 user. Nothing was decided."
            )
        try:
            user = self._users.get(name)
        except NotFound:
            return None, f"Your Slack account maps to flux7 user {name!r}, which does not exist. Nothing was decided."
        if user.disabled_at is not None:
            return None, f"flux7 user {name!r} is disabled. Nothing was decided."
        try:
            approval = self._approvals.get(approval_id)
        except NotFound:
            return None, "This approval no longer exists."
        principal = user_principal(user)
        if not principal.may_decide(approval.tool, approval.agent_id):
            return None, (
                f"{principal.actor} ({user.role}) may not decide {approval.tool} for {approval.agent_id}: outside "
                "your scope. Nothing was decided."
            )
        return principal, ""

    def _resolve(self, principal: Principal, slack_user: str, approval_id: str, decision: str, reason: str = "") -> str:
        """Resolve as this person; "" when done, else why not (already settled, your own behalf, voted, …)."""
        try:
            approval = self._approvals.resolve(
                approval_id,
                decision,
                resolved_by=principal.actor,
                note=f"slack:{slack_user}",
                resolver="",
                reasoning=reason,
                human=True,
                user=principal.name,
            )
        except Flux7Error as e:
            return f"Not decided: {e.message}."
        if approval.status == "pending":
            self._on_vote(approval)
        return ""
