"""Email: a pending approval mailed to the people who can decide it, with two links that open the console.

Sent with `smtplib` (STARTTLS unless `notify.email.starttls: false`, then AUTH when a username is set). An email
cannot be taken back: when the call is settled elsewhere, the message stays, and its links open the console
page that says what happened."""

from __future__ import annotations

import html
import json
import smtplib
import ssl
from datetime import UTC, datetime
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
    msg.add_alternative(
        _html_body(
            approval,
            arguments=arguments,
            diff=diff,
            precedents=precedents,
            approve_url=approve_url,
            deny_url=deny_url,
            escalated_from=escalated_from,
        ),
        subtype="html",
    )
    return msg


_BUTTON = "display:inline-block;padding:10px 18px;border-radius:6px;font-weight:600;text-decoration:none;color:#fff;"
_CELL = "padding:4px 12px 4px 0;vertical-align:top;"


def _deadline(expires_at: str) -> str:
    """`2026-12-05 23:00 UTC` for the person reading; the stored ISO string when it does not parse."""
    try:
        return datetime.fromisoformat(expires_at).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return expires_at


def _html_body(
    approval: Any,
    *,
    arguments: str,
    diff: str,
    precedents: str,
    approve_url: str,
    deny_url: str,
    escalated_from: str,
) -> str:
    """The HTML part: what a mail client shows. Inline styles only (mail clients drop style sheets); every value
    escaped, since the arguments come from an agent."""
    e = html.escape
    rows = [
        ("Agent", f"<code>{e(approval.agent_id)}</code>"),
        ("Tool", f"<code>{e(approval.tool)}</code>"),
        ("Policy rule", f"<code>{e(approval.policy_rule)}</code>"),
        ("Decide by", f"{e(_deadline(approval.expires_at))} (then the call is denied)"),
    ]
    if approval.required_approvals > 1:
        rows.append(("Approvals", f"{approval.required_approvals} people must approve"))
    if precedents:
        rows.append(("Precedents", e(precedents)))
    pre = "background:#f4f5f7;border:1px solid #d8dbe0;border-radius:6px;padding:10px;white-space:pre-wrap;"
    parts = ['<html><body style="font-family:system-ui,sans-serif;font-size:15px;color:#1d2129;max-width:640px">']
    if escalated_from:
        parts.append(f'<p style="color:#8a4b00"><strong>Escalated:</strong> {e(escalated_from)}</p>')
    parts.append(f'<h2 style="margin:0 0 12px">{e(approval.agent_id)} asks to call {e(approval.tool)}</h2>')
    if approval.injection_risk:
        parts.append(
            '<p style="background:#fdecea;border-left:4px solid #c62828;padding:8px 12px"><strong>The arguments '
            "look like a prompt injection.</strong> Read them before approving.</p>"
        )
    parts.append(
        '<table role="presentation" style="border-collapse:collapse;margin-bottom:12px">'
        + "".join(
            f'<tr><th style="{_CELL}text-align:left;color:#5b6270">{k}</th><td style="{_CELL}">{v}</td></tr>'
            for k, v in rows
        )
        + "</table>"
    )
    parts.append(f'<p style="margin:0 0 4px"><strong>Arguments</strong></p><pre style="{pre}">{e(arguments)}</pre>')
    if diff:
        parts.append(f'<pre style="{pre}">{e(diff)}</pre>')
    parts.append(
        f'<p style="margin:16px 0"><a href="{e(approve_url)}" style="{_BUTTON}background:#1b7f3b">Approve…</a>'
        f' &nbsp; <a href="{e(deny_url)}" style="{_BUTTON}background:#b3261e">Deny…</a></p>'
        '<p style="color:#5b6270;font-size:13px">Each link opens this approval in the flux7 console with that '
        "decision selected; you log in and confirm there. A link works once and expires with the approval.</p>"
        "</body></html>"
    )
    return "".join(parts)


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
