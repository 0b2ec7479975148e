"""The operator's webhook (`approval.notify_url`), signed per Standard Webhooks (standardwebhooks.com).

Each delivery carries `webhook-id` (the same on every retry of one message), `webhook-timestamp` (epoch seconds of
the attempt) and `webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">` under the secret
`approval.notify_secret` (`whsec_` + base64), or the one generated in the data directory (notify-webhook.secret).
A receiver checks the signature and refuses a timestamp more than five minutes off (docs/approvals.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import httpx

__all__ = ["WebhookSigner", "deliver_webhook"]


class WebhookSigner:
    def __init__(self, secret: str) -> None:
        raw = secret[len("whsec_") :] if secret.startswith("whsec_") else secret
        self._key = base64.b64decode(raw + "==")
        if len(self._key) < 16:
            raise ValueError("a webhook secret holds at least 16 bytes")

    def signature(self, msg_id: str, timestamp: int, body: bytes) -> str:
        mac = hmac.new(self._key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
        return "v1," + base64.b64encode(mac).decode()

    def headers(self, msg_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        ts = int(time.time()) if timestamp is None else timestamp
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": self.signature(msg_id, ts, body),
        }


def deliver_webhook(client: httpx.Client, url: str, signer: WebhookSigner, msg_id: str, body: bytes) -> str:
    """POST one signed message; "" when the receiver took it (2xx), else why not (the row is retried)."""
    try:
        response = client.post(url, content=body, headers=signer.headers(msg_id, body))
    except httpx.HTTPError as e:
        return f"{e.__class__.__name__}: {e}"
    if 200 <= response.status_code < 300:
        return ""
    return f"HTTP {response.status_code}"
