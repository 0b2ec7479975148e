"""`notify.*` is validated with the rest of the config: a mistake is a ConfigError that names the key."""

from __future__ import annotations

from typing import Any

import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.settings import load_settings

SLACK = {"bot_token": "xoxb-1", "signing_secret": "s" * 32, "channel": "#a"}
EMAIL = {"smtp_host": "smtp.example.com", "from": "flux7@example.com"}


@pytest.mark.parametrize(
    ("values", "key", "why"),
    [
        ({"notify": {"slack": {"bot_token": "xoxb-1"}}}, "notify.slack", "signing_secret"),
        ({"notify": {"email": {"smtp_host": "h"}}}, "notify.email", "from"),
        ({"notify": {"email": {**EMAIL, "to": ["not an address"]}}}, "notify.email.to", "an email address"),
        ({"notify": {"routes": [{"slack": "#x"}]}}, "notify.routes[0].slack", "needs notify.slack"),
        ({"notify": {"routes": [{"email": ["a@b.c"]}]}}, "notify.routes[0].email", "needs notify.email"),
        ({"notify": {"slack": SLACK, "routes": [{"tools": ["x"]}]}}, "notify.routes[0]", "slack, email or both"),
        (
            {"notify": {"slack": SLACK, "routes": [{"slack": "#x", "escalate_after": "soon"}]}},
            "notify.routes[0].escalate_after",
            "invalid duration",
        ),
        ({"notify": {"public_url": "mesh.example.com"}}, "notify.public_url", "http(s) base URL"),
        ({"notify": {"link_secret": "short"}}, "notify.link_secret", "32 characters"),
        ({"approval": {"notify_secret": "plain"}}, "approval.notify_secret", "whsec_"),
        ({"notify": {"slack": {**SLACK, "colour": "red"}}}, "notify.slack", "unknown field"),
    ],
)
def test_a_notify_mistake_names_its_key(values: dict[str, Any], key: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, env={}, **values)
    assert key in str(raised.value) and why in str(raised.value)


def test_secrets_are_expanded_from_the_environment(tmp_path: Any) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "notify:\n  slack: {bot_token: '${BOT}', signing_secret: '${SIGNING}'}\n"
        "  email: {smtp_host: h, from: f@x.y, password: '${SMTP}'}\n"
        "approval: {notify_url: 'http://127.0.0.1:1/h', notify_secret: '${WHSEC}'}\n"
    )
    env = {"BOT": "xoxb-9", "SIGNING": "sig", "SMTP": "pw", "WHSEC": "whsec_AAAA"}
    s = load_settings(config, env=env)
    assert s.notify.slack is not None and s.notify.email is not None
    assert (s.notify.slack.bot_token, s.notify.slack.signing_secret) == ("xoxb-9", "sig")
    assert (s.notify.email.password, s.notify.email.sender) == ("pw", "f@x.y")
    assert s.approval.notify_secret == "whsec_AAAA"
