"""Email: a real flux7 server mails a pending approval through a real SMTP server on loopback; its links open the
console page of the approval with the decision pre-selected (never deciding), once, until they expire."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest

from flux7.shared.auth.users import UserStore
from flux7.shared.mesh import Mesh
from flux7.shared.notify.keys import LINK_KEY_FILE
from flux7.shared.notify.links import EmailLinks
from flux7.shared.store.db import Database
from tests.gate.servers import Server, blocked_call, write_config

from .smtp import Mailbox, self_signed, smtp_server

pytestmark = pytest.mark.served  # some tests start `flux7 serve`


class Setup:
    def __init__(self, server: Server, mailbox: Mailbox, token: str, data: Path) -> None:
        self.server, self.mailbox, self.token, self.data = server, mailbox, token, data
        self.url = server.url


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("email")
    with smtp_server() as mailbox:
        db = Database(tmp / "flux7.db")
        users = UserStore(db)
        token = users.add("dave", "approver", approve_tools=["echo.*"], email="dave@example.com").token
        users.add("erin", "approver", approve_tools=["finance.*"], email="erin@example.com")  # out of scope
        db.close()
        server = Server(tmp / "config.yaml", workers=1)
        write_config(
            tmp,
            approval={"timeout_seconds": 60},
            notify={
                "public_url": server.url,
                "email": {
                    "smtp_host": "127.0.0.1",
                    "smtp_port": mailbox.port,
                    "starttls": False,
                    "from": "flux7@example.com",
                    "to": ["approvers", "oncall@example.com"],
                },
            },
        )
        server.start()
        try:
            yield Setup(server, mailbox, token, tmp)
        finally:
            server.stop()


def _links(message: EmailMessage) -> tuple[str, str]:
    body = message.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    approve = re.search(r"Approve: (\S+)", text)
    deny = re.search(r"Deny: +(\S+)", text)
    assert approve and deny, text
    return approve.group(1), deny.group(1)


def _approval_id(message: EmailMessage) -> str:
    return str(message["X-Flux7-Approval"])


def test_the_approvers_in_scope_get_the_call_and_following_the_link_then_approving_releases_it(setup: Setup) -> None:
    call = blocked_call(setup.url, "mail-me")
    message = setup.mailbox.to("dave@example.com")[0]
    assert setup.mailbox.to("oncall@example.com")
    assert not [m for rcpts, m in setup.mailbox.messages if "erin@example.com" in rcpts]  # not hers to decide
    approval_id = _approval_id(message)
    assert message["Subject"] == "[flux7] Approval needed: echo.run by bot"
    plain = message.get_body(("plain",))
    assert plain is not None and "mail-me" in plain.get_content()
    approve, _ = _links(message)
    assert approve.startswith(f"{setup.url}/integrations/email/")
    with httpx.Client(follow_redirects=False) as browser:
        landing = browser.get(approve)
        assert landing.status_code == 303
        assert landing.headers["location"] == f"/console/#/approvals/{approval_id}?decision=approve"
        console = browser.get(setup.url + landing.headers["location"])
        assert console.status_code == 200  # the console; the fragment (the page and the decision) stays in the browser
    # The link decided nothing: the call waits for the person to log in and confirm.
    assert httpx.get(f"{setup.url}/approvals/{approval_id}").json()["status"] == "pending"
    confirm = httpx.post(
        f"{setup.url}/approvals/{approval_id}/approve", headers={"Authorization": f"Bearer {setup.token}"}
    )
    assert confirm.status_code == 200, confirm.text
    assert call.result(30).status_code == 200
    assert httpx.get(f"{setup.url}/approvals/{approval_id}").json()["resolved_by"] == "user:dave"


def test_a_replayed_an_expired_and_a_tampered_link_are_refused(setup: Setup) -> None:
    call = blocked_call(setup.url, "replay-me")
    message = setup.mailbox.to("dave@example.com", count=2)[-1]
    approval_id = _approval_id(message)
    approve, deny = _links(message)
    assert httpx.get(deny).status_code == 303
    replayed = httpx.get(deny)
    assert replayed.status_code == 410
    assert "already used" in replayed.text and f"/console/#/approvals/{approval_id}" in replayed.text
    token = approve.rsplit("/", 1)[1]
    version, payload, mac = token.split(".")
    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    tampered = httpx.get(f"{setup.url}/integrations/email/{version}.{flipped}.{mac}")
    assert tampered.status_code == 400 and "altered" in tampered.text
    assert httpx.get(f"{setup.url}/integrations/email/nonsense").status_code == 400
    # A link signed with the server's own key whose time has passed (notify.email.link_ttl_seconds, or the approval's
    # deadline).
    db = Database(setup.data / "flux7.db")
    key = (setup.data / LINK_KEY_FILE).read_text().strip().encode()
    expired = EmailLinks(key, db).make(approval_id, "approve", time.time() - 1)
    db.close()
    gone = httpx.get(f"{setup.url}/integrations/email/{expired}")
    assert gone.status_code == 410 and "expired" in gone.text
    # The untouched approve link still works, once.
    assert httpx.get(approve).status_code == 303
    assert httpx.get(approve).status_code == 410
    assert httpx.get(f"{setup.url}/approvals/{approval_id}").json()["status"] == "pending"
    httpx.post(f"{setup.url}/approvals/{approval_id}/deny", headers={"Authorization": f"Bearer {setup.token}"})
    assert call.result(30).status_code == 403


def test_mail_goes_through_starttls_with_a_verified_certificate_and_auth(
    tmp_path: Path, mesh_of: Callable[..., Mesh]
) -> None:
    cert, key = self_signed(tmp_path)
    with smtp_server(tls=(cert, key), credentials=("mesh", "s3cret")) as mailbox:
        mesh = mesh_of(
            notify={
                "email": {
                    "smtp_host": "127.0.0.1",
                    "smtp_port": mailbox.port,
                    "ca_file": str(cert),
                    "username": "mesh",
                    "password": "s3cret",
                    "from": "flux7@example.com",
                    "to": ["ops@example.com"],
                }
            }
        )
        a = mesh.approvals.submit(
            agent="bot", tool="fs.write", arguments={"p": 1}, trace_id="t", policy_rule="gate", policy_version=""
        )
        message = mailbox.to("ops@example.com")[0]
        assert mailbox.logins == ["mesh"]
        assert message["X-Flux7-Approval"] == a.id
        assert mesh.notifications is not None
        mesh.notifications.stop()
