"""What an approver sees in Slack: the Block Kit message of a pending approval, the same message once it is
settled (no buttons, the outcome), and the "Deny with reason" modal.

Everything that comes from an agent (tool, arguments, diff) is escaped (`&`, `<`, `>`), so it can neither mention
anyone (`<!channel>`) nor disguise a link, and code blocks cannot be closed from inside."""

from __future__ import annotations

import json
from typing import Any

from flux7.shared.gate.guard import redact

__all__ = [
    "ACTION_APPROVE",
    "ACTION_DENY",
    "ACTION_DENY_REASON",
    "REASON_BLOCK",
    "REASON_INPUT",
    "REASON_VIEW",
    "deny_reason_modal",
    "pending_message",
    "settled_message",
]

ACTION_APPROVE = "flux7_approve"
ACTION_DENY = "flux7_deny"
ACTION_DENY_REASON = "flux7_deny_reason"
REASON_VIEW = "flux7_deny_reason"  # the modal's callback_id
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"
_TEXT_LIMIT = 2900  # a section's text holds 3000 characters


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str, limit: int = _TEXT_LIMIT) -> str:
    text = escape(text).replace("```", "`\u200b``")
    if len(text) > limit:
        text = text[:limit] + "\n… (cut: the whole call is on the console)"
    return f"```{text}```"


def _date(ts: float, fallback: str) -> str:
    """A time every reader sees in their own zone (Slack's date formatting), with the UTC text as fallback."""
    return f"<!date^{int(ts)}^{{date_short_pretty}} {{time}}|{fallback}>"


def _fields(approval: Any) -> dict[str, Any]:
    fields = [
        {"type": "mrkdwn", "text": f"*Agent*\n`{escape(approval.agent_id)}`"},
        {"type": "mrkdwn", "text": f"*Tool*\n`{escape(approval.tool)}`"},
        {"type": "mrkdwn", "text": f"*Policy rule*\n`{escape(approval.policy_rule)}`"},
        {"type": "mrkdwn", "text": f"*Deadline*\n{_date(approval.expires_ts, approval.expires_at)}"},
    ]
    if approval.required_approvals > 1:
        fields.append({"type": "mrkdwn", "text": f"*Needs*\n{approval.required_approvals} people to approve"})
    if approval.requester_user:
        fields.append({"type": "mrkdwn", "text": f"*On behalf of*\n{escape(approval.requester_user)}"})
    return {"type": "section", "fields": fields}


def _call_blocks(approval: Any, expose_content: bool, precedents: str, console_url: str) -> list[dict[str, Any]]:
    params = approval.params if expose_content else redact(approval.params)
    blocks: list[dict[str, Any]] = [
        _fields(approval),
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": "*Arguments*\n" + _code(json.dumps(params, indent=2, ensure_ascii=False)),
            },
        },
    ]
    preview = approval.preview
    if isinstance(preview, dict) and preview.get("kind") == "diff" and expose_content:
        path = escape(str(preview.get("path", "")))
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"*Diff* `{path}`\n" + _code(str(preview.get("diff", "")))},
            }
        )
    elif preview is not None and not expose_content:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": "A diff is attached (redacted)."}]})
    context = [f"Precedents: {escape(precedents)}"] if precedents else []
    if approval.injection_risk:
        context.append(":warning: *The arguments look like a prompt injection.*")
    id_text = f"Approval `{approval.id}`"
    if console_url:
        id_text += f" · <{console_url}|Open in the console>"
    context.append(id_text)
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": t} for t in context]})
    return blocks


def pending_message(
    approval: Any, *, expose_content: bool, precedents: str, console_url: str, escalated_from: str = ""
) -> dict[str, Any]:
    """`chat.postMessage` arguments (text, blocks) for a pending approval."""
    title = f"Approval needed: {approval.tool}"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title[:150]}}]
    if escalated_from:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f":rotating_light: Escalated: {escape(escalated_from)}"}],
            }
        )
    blocks.extend(_call_blocks(approval, expose_content, precedents, console_url))
    blocks.append(
        {
            "type": "actions",
            "block_id": "flux7_decide",
            "elements": [
                _button("Approve", ACTION_APPROVE, approval.id, "primary"),
                _button("Deny", ACTION_DENY, approval.id, "danger"),
                _button("Deny with reason", ACTION_DENY_REASON, approval.id),
            ],
        }
    )
    text = f"Approval needed: {approval.agent_id} wants to call {approval.tool}"
    return {"text": escape(text), "blocks": blocks}


def _button(label: str, action_id: str, value: str, style: str = "") -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


_OUTCOME = {"approved": ":white_check_mark: Approved", "denied": ":x: Denied", "timeout": ":hourglass: Timed out"}


def settled_message(
    approval: Any, *, expose_content: bool, precedents: str, console_url: str, votes: str = ""
) -> dict[str, Any]:
    """`chat.update` arguments once the approval is settled (or, with `votes`, still waiting for more people)."""
    if approval.status == "pending":
        outcome = f":ballot_box_with_ballot: {votes}"
        title = f"Approval needed: {approval.tool}"
    else:
        outcome = f"{_OUTCOME.get(approval.status, approval.status)} by {escape(approval.resolved_by)}"
        if approval.status == "timeout":
            outcome = ":hourglass: Timed out: nobody decided in time (denied as system:timeout)"
        if approval.reasoning:
            outcome += f"\n>{escape(approval.reasoning)}"
        title = f"{_OUTCOME.get(approval.status, approval.status).split(' ', 1)[1]}: {approval.tool}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": outcome}},
        *_call_blocks(approval, expose_content, precedents, console_url),
    ]
    if approval.status == "pending":  # four eyes: the others still decide here
        blocks.append(pending_message(approval, expose_content=False, precedents="", console_url="")["blocks"][-1])
    return {"text": escape(title), "blocks": blocks}


def deny_reason_modal(approval_id: str, tool: str, metadata: str) -> dict[str, Any]:
    """`views.open` view: one text input; its submission comes back to the interaction URL (view_submission)."""
    return {
        "type": "modal",
        "callback_id": REASON_VIEW,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": "Deny with reason"},
        "submit": {"type": "plain_text", "text": "Deny"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"Deny `{escape(tool)}` (approval `{approval_id}`)."},
            },
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": {"type": "plain_text", "text": "Reason (the agent is told)"},
                "element": {"type": "plain_text_input", "action_id": REASON_INPUT, "multiline": True},
            },
        ],
    }
