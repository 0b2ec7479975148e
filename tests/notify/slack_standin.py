"""A Slack Web API stand-in on loopback: a real HTTP server speaking the methods flux7 uses (chat.postMessage,
chat.update, chat.postEphemeral, users.info, views.open), recording every call, and able to send signed
interaction payloads to flux7's callback the way Slack does (`payload=<JSON>`, form-encoded, with
`X-Slack-Request-Timestamp` and `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<ts>:<body>">`)."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx

from tests.support.waiting import wait_until

__all__ = ["SlackStandIn", "slack_standin"]

BOT_TOKEN = "xoxb-flux7-test"


class SlackStandIn:
    def __init__(self, signing_secret: str) -> None:
        self.signing_secret = signing_secret
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.emails: dict[str, str] = {}  # Slack user id -> the email users.info answers
        self.base_url = ""
        self._lock = threading.Lock()
        self._ts = itertools.count(1)

    # -- the Web API --------------------------------------------------------------------------------------------

    def answer(self, method: str, args: dict[str, Any], authorization: str) -> dict[str, Any]:
        response = self._answer(method, args, authorization)
        with self._lock:
            self.calls.append((method, {**args, "_response": response}))
        return response

    def _answer(self, method: str, args: dict[str, Any], authorization: str) -> dict[str, Any]:
        if authorization != f"Bearer {BOT_TOKEN}":
            return {"ok": False, "error": "invalid_auth"}
        if method == "chat.postMessage":
            channel = str(args["channel"])
            channel_id = channel if channel.startswith("C") else "C" + hashlib.sha1(channel.encode()).hexdigest()[:8]
            return {"ok": True, "channel": channel_id.upper(), "ts": f"1700000000.{next(self._ts):06d}"}
        if method == "chat.update":
            return {"ok": True, "channel": args["channel"], "ts": args["ts"]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"1700000001.{next(self._ts):06d}"}
        if method == "views.open":
            return {"ok": True, "view": {"id": "V0001", **json.loads(json.dumps(args.get("view", {})))}}
        if method == "users.info":
            user = str(args.get("user", ""))
            if user not in self.emails:
                return {"ok": False, "error": "user_not_found"}
            return {"ok": True, "user": {"id": user, "profile": {"email": self.emails[user]}}}
        return {"ok": False, "error": "unknown_method"}

    def called(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [args for m, args in self.calls if m == method]

    def wait_for(self, method: str, predicate: Callable[[dict[str, Any]], bool] = lambda _: True) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((a for a in self.called(method) if predicate(a)), None)

        result: dict[str, Any] = wait_until(found, timeout=20, what=f"Slack {method}")
        return result

    # -- Slack calling flux7 -------------------------------------------------------------------------------------

    def signed(self, body: str, *, timestamp: int | None = None, secret: str | None = None) -> dict[str, str]:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        key = (self.signing_secret if secret is None else secret).encode()
        mac = hmac.new(key, f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
        return {
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": ts,
            "x-slack-signature": f"v0={mac}",
        }

    def interact(
        self, flux7_url: str, payload: dict[str, Any], *, timestamp: int | None = None, secret: str | None = None
    ) -> httpx.Response:
        body = urlencode({"payload": json.dumps(payload)})
        headers = self.signed(body, timestamp=timestamp, secret=secret)
        return httpx.post(f"{flux7_url}/integrations/slack/actions", content=body, headers=headers, timeout=30)


def block_action(user: str, action_id: str, approval_id: str, channel: str, ts: str) -> dict[str, Any]:
    """A `block_actions` payload as Slack sends it when someone clicks a button of our message."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
        "api_app_id": "A0001",
        "trigger_id": f"trigger-{user}-{action_id}",
        "team": {"id": "T0001"},
        "container": {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False},
        "channel": {"id": channel, "name": "approvals"},
        "message": {"ts": ts, "type": "message"},
        "response_url": "https://hooks.slack.invalid/actions/T0001/1/x",
        "actions": [
            {
                "type": "button",
                "block_id": "flux7_decide",
                "action_id": action_id,
                "value": approval_id,
                "action_ts": str(time.time()),
            }
        ],
    }


def view_submission(user: str, view: dict[str, Any], reason: str) -> dict[str, Any]:
    """A `view_submission` payload for the modal flux7 opened (`view` as views.open received it)."""
    return {
        "type": "view_submission",
        "user": {"id": user, "team_id": "T0001"},
        "team": {"id": "T0001"},
        "view": {
            "id": "V0001",
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {"reason": {"reason_input": {"type": "plain_text_input", "value": reason}}}},
        },
    }


@contextmanager
def slack_standin(signing_secret: str) -> Iterator[SlackStandIn]:
    standin = SlackStandIn(signing_secret)

    class _H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            parts = urlsplit(self.path)
            args: dict[str, Any] = dict(parse_qsl(parts.query))
            if "json" in (self.headers.get("content-type") or ""):
                args.update(json.loads(raw or "{}"))
            elif raw:
                args.update(dict(parse_qsl(raw)))
            method = parts.path.rsplit("/", 1)[-1]
            data = json.dumps(standin.answer(method, args, self.headers.get("authorization") or "")).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    standin.base_url = f"http://127.0.0.1:{server.server_address[1]}/api/"
    try:
        yield standin
    finally:
        server.shutdown()
        server.server_close()
