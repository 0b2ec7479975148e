"""`notify.*`: where pending approvals are announced (Slack, email), how they escalate, and how deliveries retry.

Validated once with the rest of the config (shared/settings.py calls `validate_notify`)."""

from __future__ import annotations

import msgspec

from flux7.shared.durations import parse_duration
from flux7.shared.errors import ConfigError

__all__ = [
    "APPROVERS",
    "EmailSettings",
    "NotifySettings",
    "Route",
    "SlackSettings",
    "validate_notify",
]

APPROVERS = "approvers"  # in a route's `email`: the users who may decide the call and have an email address
SLACK_API = "https://slack.com/api/"


class SlackSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    bot_token: str = ""  # xoxb-…: chat:write, users:read, users:read.email
    signing_secret: str = ""  # verifies Slack's interaction callbacks
    channel: str = ""  # where a call no route sends elsewhere is posted
    api_url: str = SLACK_API
    users: dict[str, str] = {}  # Slack user id -> flux7 user name; anyone else is matched by email (users.info)
    timeout_seconds: float = 10


class EmailSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    smtp_host: str = ""
    smtp_port: int = 587
    starttls: bool = True
    ca_file: str = ""  # a private CA for the relay's certificate (default: the system's)
    username: str = ""
    password: str = ""
    sender: str = msgspec.field(name="from", default="")
    to: tuple[str, ...] = ()  # where a call no route sends elsewhere is mailed (addresses, or "approvers")
    link_ttl_seconds: float = 0  # 0: a link lives as long as its approval may still be decided
    timeout_seconds: float = 20


class Route(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str = ""
    tools: tuple[str, ...] = ("*",)
    agents: tuple[str, ...] = ("*",)
    policies: tuple[str, ...] = ("*",)  # the deciding policy rule (`policy_rule` of the approval)
    slack: str = ""  # a channel ("#finance-approvals" or its id)
    email: tuple[str, ...] = ()  # addresses, or "approvers"
    escalate_after: str = ""  # a Go duration: nobody decided by then, the call's next route is told too

    @property
    def escalate_seconds(self) -> float:
        return parse_duration(self.escalate_after) if self.escalate_after else 0.0


class NotifySettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    public_url: str = ""  # the base URL links in emails and Slack messages point to
    link_secret: str = ""  # HMAC key of email links; default: notify-links.key
    retry_max_seconds: float = 300
    max_attempts: int = 20
    slack: SlackSettings | None = None
    email: EmailSettings | None = None
    routes: tuple[Route, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.slack is not None or self.email is not None


def validate_notify(file: str, n: NotifySettings) -> None:
    if n.public_url and (not n.public_url.startswith(("https://", "http://")) or "?" in n.public_url):
        raise ConfigError(file, "notify.public_url", "an http(s) base URL such as https://mesh.example.com")
    if n.link_secret and len(n.link_secret) < 32:
        raise ConfigError(file, "notify.link_secret", "at least 32 characters (e.g. `openssl rand -hex 32`)")
    if n.retry_max_seconds <= 0:
        raise ConfigError(file, "notify.retry_max_seconds", "must be > 0")
    if n.max_attempts < 1:
        raise ConfigError(file, "notify.max_attempts", "must be >= 1")
    if n.slack is not None:
        if not n.slack.bot_token or not n.slack.signing_secret:
            raise ConfigError(file, "notify.slack", "bot_token and signing_secret are both required")
        if not n.slack.api_url.startswith(("https://", "http://")):
            raise ConfigError(file, "notify.slack.api_url", "an http(s) URL such as https://slack.com/api/")
    if n.email is not None:
        if not n.email.smtp_host or not n.email.sender:
            raise ConfigError(file, "notify.email", "smtp_host and from are both required")
        if not 0 < n.email.smtp_port < 65536:
            raise ConfigError(file, "notify.email.smtp_port", "a port, 1 to 65535")
        if n.email.link_ttl_seconds < 0:
            raise ConfigError(file, "notify.email.link_ttl_seconds", "must be >= 0 (0: the approval's deadline)")
        _addresses(file, "notify.email.to", n.email.to)
    names: set[str] = set()
    for i, r in enumerate(n.routes):
        where = f"notify.routes[{i}]"
        if r.name:
            if r.name in names:
                raise ConfigError(file, f"{where}.name", f"duplicate route name {r.name!r}")
            names.add(r.name)
        if not r.slack and not r.email:
            raise ConfigError(file, where, "a route sends to slack, email or both")
        if r.slack and n.slack is None:
            raise ConfigError(file, f"{where}.slack", "needs notify.slack (bot_token, signing_secret)")
        if r.email and n.email is None:
            raise ConfigError(file, f"{where}.email", "needs notify.email (smtp_host, from)")
        _addresses(file, f"{where}.email", r.email)
        try:
            seconds = r.escalate_seconds
        except ValueError as e:
            raise ConfigError(file, f"{where}.escalate_after", str(e)) from None
        if seconds < 0:
            raise ConfigError(file, f"{where}.escalate_after", "must be > 0")


def _addresses(file: str, key: str, values: tuple[str, ...]) -> None:
    for v in values:
        if v != APPROVERS and ("@" not in v or any(c in v for c in " \r\n<>,")):
            raise ConfigError(file, key, f"an email address or {APPROVERS!r}, not {v!r}")
