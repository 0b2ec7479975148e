"""Where Slack and email come back in (docs/approvals.md "Notifications").

- `POST /integrations/slack/actions`: Slack's interaction callback (a form body `payload=<JSON>`). Nothing in it
  is read before its signature verifies (401 otherwise); the person who clicked decides as their flux7 user.
- `GET /integrations/email/{token}`: an email link. A valid, unexpired, unused link is used up and redirects
  (303) to the console's page of its approval with the decision pre-selected; the link decides nothing, the person
  logs in there and confirms. A tampered link is a 400 page, an expired or used one a 410 page.

Neither is REST (a form body Slack signs, HTML pages and redirects for a browser): both stay out of the OpenAPI
document, as /sse does. Both answer 404 when their channel is not configured."""

from __future__ import annotations

import html
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath, RawBody

from flux7.functions.auth import mesh_of
from flux7.shared.errors import NotFound
from flux7.shared.notify.links import LinkRefused
from flux7.shared.notify.service import Notifications

__all__ = ["ROUTES"]


def _notifications(request: Request[Any, Any, Any]) -> Notifications | None:
    return mesh_of(request).notifications


@post("/integrations/slack/actions", status_code=200, sync_to_thread=True, include_in_schema=False)
def slack_actions(request: Request[Any, Any, Any], body: RawBody) -> Response[bytes]:
    notifications = _notifications(request)
    if notifications is None or notifications.interactions is None:
        raise NotFound("Slack is not configured (notify.slack)")
    answer = notifications.interactions.handle(bytes(body), request.headers)
    if answer.body is None:
        return Response(b"", status_code=200, media_type="text/plain")
    return Response(msgspec.json.encode(answer.body), status_code=200, media_type="application/json")


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>{title}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}}</style>
</head><body><h1>{title}</h1><p>{message}</p>{more}</body></html>
"""


def _page(status: int, title: str, message: str, more: str = "") -> Response[str]:
    text = _PAGE.format(title=html.escape(title), message=html.escape(message), more=more)
    headers = {"cache-control": "no-store", "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'"}
    return Response(text, status_code=status, media_type="text/html", headers=headers)


@get("/integrations/email/{token:str}", sync_to_thread=True, include_in_schema=False)
def email_link(request: Request[Any, Any, Any], token: FromPath[str]) -> Response[str]:
    notifications = _notifications(request)
    if notifications is None or notifications.links is None:
        return _page(404, "Not found", "Email notifications are not configured on this server.")
    try:
        target = notifications.links.redeem(token)
    except LinkRefused as e:
        more = ""
        if e.approval_id:  # a genuine link, past its use: the approval page still says what happened
            url = html.escape(f"/console/#/approvals/{e.approval_id}")
            more = f'<p><a href="{url}">Open the approval in the console</a> to see where it stands.</p>'
        title = "Link not valid" if e.status_code == 400 else "Link no longer valid"
        return _page(e.status_code, title, e.message[:1].upper() + e.message[1:] + ".", more)
    location = f"/console/#/approvals/{target.approval_id}?decision={target.decision}"
    return Response(
        "",
        status_code=303,
        media_type="text/html",
        headers={"location": location, "cache-control": "no-store", "referrer-policy": "no-referrer"},
    )


ROUTES = [slack_actions, email_link]
