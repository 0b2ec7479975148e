"""Email: a pending approval mailed to the people who can decide it, with two links that open the console.

Sent with `smtplib` (STARTTLS unless `notify.email.starttls: false`, then AUTH when a username is set). An email
cannot be taken back: when the call is settled elsewhere, the message stays, and its links open the console
page that says what happened."""

from __future__ import annotations

import html
import json
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from flux7.shared.gate.guard import redact
from flux7.shared.notify.settings import EmailSettings

__all__ = ["approval_email", "permanent", "send_email"]

_BODY_LIMIT = 20000


def approval_email(
    approval: Any,
    *,
    sender: str,
    to: str,
    approve_url: str,
    deny_url: str,
    console_url: str,
    expose_content: bool,
    precedents: str,
    escalated_from: str = "",
) -> EmailMessage:
    params = approval.params if expose_content else redact(approval.params)
    arguments = json.dumps(params, indent=2, ensure_ascii=False)[:_BODY_LIMIT]
    diff = ""
    preview = approval.preview
    if expose_content and isinstance(preview, dict) and preview.get("kind") == "diff":
        diff = f"Diff of {preview.get('path', '')}:\n{str(preview.get('diff', ''))[:_BODY_LIMIT]}\n"
    lines = [f"Escalated: {escalated_from}", ""] if escalated_from else []
    lines += [
        f"The agent {approval.agent_id} wants to call {approval.tool} (policy rule {approval.policy_rule}).",
        f"Decide before {approval.expires_at}; after that the call is denied.",
    ]
    if approval.required_approvals > 1:
        lines.append(f"It needs {approval.required_approvals} people to approve it.")
    if approval.injection_risk:
        lines.append("WARNING: the arguments look like a prompt injection. Read them before approving.")
    lines += ["", "Arguments:", arguments, ""]
    if diff:
        lines.append(diff)
    if precedents:
        lines += [f"Precedents: {precedents}", ""]
    lines += [
        f"Approve: {approve_url}",
        f"Deny:    {deny_url}",
        "",
        "Each link opens the approval in the flux7 console with that decision selected; you log in and confirm",
        "there. A link works once and expires with the approval.",
        f"The approval: {console_url}",
    ]
    text = "\n".join(lines)
    msg = EmailMessage()
    msg["Subject"] = f"[flux7] Approval needed: {approval.tool} by {approval.agent_id}"
    msg["From"] = sender
    msg["To"] = to
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg["X-Flux7-Approval"] = approval.id
    msg.set_content(text)
    e = html.escape
    msg.add_alternative(
        "<html><body>"
        + (f"<p><strong>Escalated:</strong> {e(escalated_from)}</p>" if escalated_from else "")
        + f"<p>The agent <code>{e(approval.agent_id)}</code> wants to call <code>{e(approval.tool)}</code> "
        f"(policy rule <code>{e(approval.policy_rule)}</code>). Decide before {e(approval.expires_at)}.</p>"
        + ("<p><strong>The arguments look like a prompt injection.</strong></p>" if approval.injection_risk else "")
        + f"<pre>{e(arguments)}</pre>"
        + (f"<pre>{e(diff)}</pre>" if diff else "")
        + (f"<p>Precedents: {e(precedents)}</p>" if precedents else "")
        + f'<p><a href="{e(approve_url)}">Approve…</a> &nbsp; <a href="{e(deny_url)}">Deny…</a></p>'
        + "<p>Each link opens the approval in the flux7 console with that decision selected; you log in and "
        "confirm there. A link works once and expires with the approval.</p></body></html>",
        subtype="html",
    )
    return msg


def send_email(settings: EmailSettings, message: EmailMessage) -> None:
    """Hand one message to the relay. Raises smtplib.SMTPException or OSError."""
    with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.timeout_seconds) as smtp:
        smtp.ehlo()
        if settings.starttls:
            context = ssl.create_default_context(cafile=settings.ca_file or None)
            smtp.starttls(context=context)
            smtp.ehlo()
        if settings.username:
            smtp.login(settings.username, settings.password)
        smtp.send_message(message)


def permanent(error: Exception) -> bool:
    """A refusal that retrying cannot change: the relay refused the recipient, the sender or our credentials."""
    if isinstance(error, smtplib.SMTPRecipientsRefused | smtplib.SMTPSenderRefused | smtplib.SMTPAuthenticationError):
        return True
    if isinstance(error, smtplib.SMTPResponseException):
        return 500 <= error.smtp_code < 600
    return False
