"""The approval email as built, without a server: what both parts say, and that nothing an agent sent can turn
into markup in the HTML part."""

from __future__ import annotations

from email.message import EmailMessage

from flux7.shared.gate.approvals import Approval
from flux7.shared.notify.email import approval_email


def _approval(**overrides: object) -> Approval:
    fields: dict[str, object] = {
        "id": "ap1",
        "agent_id": "claude",
        "tool": "finance.pay",
        "params": {"to": "<script>alert(1)</script>"},
        "trace_id": "t1",
        "policy_rule": "payments",
        "status": "pending",
        "created_at": "2026-12-05T22:00:00Z",
        "expires_at": "2026-12-05T23:00:20.621901Z",
    }
    return Approval(**{**fields, **overrides})  # type: ignore[arg-type]


def _parts(message: EmailMessage) -> tuple[str, str]:
    plain, html = message.get_body(("plain",)), message.get_body(("html",))
    assert plain is not None and html is not None
    return plain.get_content(), html.get_content()


def _mail(approval: Approval, *, expose_content: bool = True) -> EmailMessage:
    return approval_email(
        approval,
        sender="flux7@example.com",
        to="dave@example.com",
        approve_url="https://mesh.example.com/integrations/email/v1.a?x=1&y=2",
        deny_url="https://mesh.example.com/integrations/email/v1.d",
        console_url="https://mesh.example.com/console/#/approvals/ap1",
        expose_content=expose_content,
        precedents="approved 3 times",
    )


def test_the_html_part_escapes_what_the_agent_sent_and_says_when_to_decide() -> None:
    plain, html = _parts(_mail(_approval()))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<script>alert(1)</script>" in plain  # the text part is text: nothing to escape
    assert "2026-12-05 23:00 UTC (then the call is denied)" in html
    assert 'href="https://mesh.example.com/integrations/email/v1.a?x=1&amp;y=2"' in html
    assert "claude asks to call finance.pay" in html and "approved 3 times" in html
    assert "must approve" not in html and "prompt injection" not in html


def test_four_eyes_a_suspected_injection_and_hidden_content_show_in_both_parts() -> None:
    held = _approval(required_approvals=2, injection_risk=True, params={"content": "the quarterly figures"})
    plain, html = _parts(_mail(held, expose_content=False))
    assert "2 people must approve" in html and "It needs 2 people to approve it." in plain
    assert "look like a prompt injection" in html and "WARNING: the arguments look like a prompt injection" in plain
    # approval.expose_content off: content-bearing values are summarised, as everywhere else
    assert "quarterly" not in html and "quarterly" not in plain and '"content"' in plain


def test_an_unreadable_deadline_is_shown_as_stored() -> None:
    _, html = _parts(_mail(_approval(expires_at="soon")))
    assert "soon (then the call is denied)" in html
