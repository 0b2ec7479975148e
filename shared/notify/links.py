"""Signed, single-use, expiring email links: they open the console's page for one approval with a decision
pre-selected. A link never decides anything: the person still logs in to the console and confirms.

A link is `v1.<payload>.<mac>`: the payload is base64url JSON `{a: approval id, d: approve|deny, n: link id,
x: expiry (epoch s)}`, the MAC HMAC-SHA256 over a domain string and the payload under a server secret
(`notify.link_secret`, else notify-links.key in the data directory), compared in constant time. The link ids
followed are stored (notify_used_links), so a second use is refused."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from typing import Any

import msgspec

from flux7.shared.errors import Flux7Error
from flux7.shared.store.db import Database

__all__ = ["EmailLinks", "LinkRefused", "LinkTarget"]

_DOMAIN = b"flux7-email-link/1\n"
DECISIONS = ("approve", "deny")


class LinkRefused(Flux7Error):
    """A link that is not honoured: tampered or malformed (400), expired or already used (410)."""

    def __init__(self, message: str, status: int, approval_id: str = "") -> None:
        super().__init__(message)
        self.status_code = status
        self.approval_id = approval_id


class LinkTarget(msgspec.Struct, frozen=True):
    approval_id: str
    decision: str
    link_id: str
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class EmailLinks:
    def __init__(self, key: bytes, db: Database) -> None:
        if len(key) < 32:
            raise ValueError("an email link key holds at least 32 bytes")
        self._key = key
        self._db = db

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key, _DOMAIN + payload.encode(), hashlib.sha256).digest()

    def make(self, approval_id: str, decision: str, expires_at: float) -> str:
        if decision not in DECISIONS:
            raise ValueError(f"decision must be approve or deny, not {decision!r}")
        body = {"a": approval_id, "d": decision, "n": secrets.token_hex(12), "x": int(expires_at)}
        payload = _b64(msgspec.json.encode(body))
        return f"v1.{payload}.{_b64(self._mac(payload))}"

    def verify(self, token: str) -> LinkTarget:
        """The link's target when its signature holds; LinkRefused (400) otherwise. Does not check expiry or use."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != "v1" or len(token) > 1000:
            raise LinkRefused("this link is not a valid flux7 approval link", 400)
        try:
            mac = _unb64(parts[2])
        except (binascii.Error, ValueError):
            raise LinkRefused("this link is not a valid flux7 approval link", 400) from None
        if not hmac.compare_digest(mac, self._mac(parts[1])):
            raise LinkRefused("this link has been altered: its signature does not match", 400)
        try:
            body: Any = msgspec.json.decode(_unb64(parts[1]))
            target = LinkTarget(str(body["a"]), str(body["d"]), str(body["n"]), float(body["x"]))
        except (binascii.Error, ValueError, KeyError, TypeError, msgspec.DecodeError):
            raise LinkRefused("this link is not a valid flux7 approval link", 400) from None
        if target.decision not in DECISIONS:
            raise LinkRefused("this link is not a valid flux7 approval link", 400)
        return target

    def redeem(self, token: str) -> LinkTarget:
        """Verify the link and use it up. LinkRefused: 400 tampered, 410 expired or already used."""
        target = self.verify(token)
        now = time.time()
        if target.expires_at <= now:
            raise LinkRefused("this link has expired", 410, target.approval_id)
        with self._db.write() as conn:
            taken = conn.execute(
                "INSERT INTO notify_used_links (link_id, approval_id, used_at, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (target.link_id, target.approval_id, now, target.expires_at),
            ).rowcount
            conn.execute("DELETE FROM notify_used_links WHERE expires_at < ?", (now - 86400,))
        if not taken:
            raise LinkRefused("this link was already used", 410, target.approval_id)
        return target
