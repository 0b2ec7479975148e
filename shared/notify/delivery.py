"""Delivering one Slack or email row of the notification outbox (shared/notify/service.py claims it)."""

from __future__ import annotations

import logging
import smtplib
import time
from typing import TYPE_CHECKING, Any

from flux7.shared.errors import NotFound
from flux7.shared.notify.email import approval_email, permanent, send_email
from flux7.shared.notify.outbox import OutboxItem
from flux7.shared.notify.service import precedents_summary
from flux7.shared.notify.slack_blocks import pending_message, settled_message

if TYPE_CHECKING:
    from flux7.shared.notify.service import Notifications

__all__ = ["deliver_email", "deliver_slack"]

log = logging.getLogger("flux7.notify")


def _summary(n: Notifications, approval: Any) -> str:
    return precedents_summary(n.approvals.couple_history(approval.agent_id, approval.tool, exclude=approval.id))


def deliver_slack(n: Notifications, item: OutboxItem) -> tuple[str, bool]:
    from flux7.shared.notify.slack import retryable

    try:
        approval = n.approvals.get(item.approval_id)
    except NotFound:
        return "", False  # gone: nothing to post or update
    expose = n.approvals.expose_content
    console = n.console_url(approval.id)
    try:
        if item.kind == "slack.post":
            if approval.status != "pending":
                return "", False  # settled before it was posted: no message to show
            message = pending_message(
                approval,
                expose_content=expose,
                precedents=_summary(n, approval),
                console_url=console,
                escalated_from=str(item.payload.get("escalated_from", "")),
            )
            channel, ts = n.slack.post(str(item.payload["channel"]), message)
            n.db.execute(
                "INSERT INTO notify_slack_messages (approval_id, channel, ts, posted_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (approval.id, channel, ts, time.time()),
            )
            return "", False
        if item.kind == "slack.update":
            votes = ""
            if approval.status == "pending" and approval.required_approvals > 1:
                who = ", ".join(v.actor for v in approval.votes if v.decision == "approve")
                votes = f"{approval.approved_votes} of {approval.required_approvals} approvals so far: {who}"
            message = settled_message(
                approval, expose_content=expose, precedents=_summary(n, approval), console_url=console, votes=votes
            )
            for row in n.db.query(
                "SELECT channel, ts FROM notify_slack_messages WHERE approval_id = ? ORDER BY posted_at", (approval.id,)
            ):
                n.slack.update(str(row[0]), str(row[1]), message)
            return "", False
    except Exception as e:
        return f"{e.__class__.__name__}: {e}", not retryable(e)
    return f"unknown Slack notification {item.kind!r}", True


def deliver_email(n: Notifications, item: OutboxItem) -> tuple[str, bool]:
    config = n.config.email
    if config is None or n.links is None:
        return "", False  # email was removed from the config
    try:
        approval = n.approvals.get(item.approval_id)
    except NotFound:
        return "", False
    if approval.status != "pending":
        return "", False  # settled before it was mailed: an email cannot be taken back, so none is sent
    expires = approval.expires_ts
    if config.link_ttl_seconds:
        expires = min(expires, time.time() + config.link_ttl_seconds)
    base = n.base_url()
    message = approval_email(
        approval,
        sender=config.sender,
        to=str(item.payload["to"]),
        approve_url=f"{base}/integrations/email/{n.links.make(approval.id, 'approve', expires)}",
        deny_url=f"{base}/integrations/email/{n.links.make(approval.id, 'deny', expires)}",
        console_url=n.console_url(approval.id),
        expose_content=n.approvals.expose_content,
        precedents=_summary(n, approval),
        escalated_from=str(item.payload.get("escalated_from", "")),
    )
    try:
        send_email(config, message)
    except (smtplib.SMTPException, OSError) as e:
        return f"{e.__class__.__name__}: {e}", permanent(e)
    return "", False
