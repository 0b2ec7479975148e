"""Console logins (docs/security.md "Single sign-on"): single sign-on through the configured OpenID Connect
provider, a local user's personal token, logout. Each login ends in a console session cookie: HttpOnly,
SameSite=Strict, Secure when served over HTTPS (or behind `X-Forwarded-Proto: https`), expiring after
`auth.session_hours`. The login POSTs change state, so the browser guard (functions/csrf.py) keeps them
same-origin, as every other."""

from __future__ import annotations

import html
from typing import Annotated, Any
from urllib.parse import quote, unquote

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.params import QueryParameter, RawBody

from flux7.functions.approvals import json_object, text_field
from flux7.functions.auth import mesh_of, peer_of
from flux7.functions.openapi import BODY, PUBLIC, json_body, ok, operation, responses
from flux7.functions.wellknown import public_base
from flux7.shared.auth.identity import Principal, user_principal
from flux7.shared.auth.sso import LOGIN_SECONDS, SingleSignOn
from flux7.shared.auth.users import SESSION_COOKIE, User, looks_like_user_token
from flux7.shared.errors import BadRequest, Flux7Error, NotImplementedFeature, Unauthorized

__all__ = ["ROUTES"]

STATE_COOKIE = "flux7_login_state"
NEXT_COOKIE = "flux7_login_next"  # the console route to come back to (an email link's approval, a consent)
CALLBACK = "/login/oidc/callback"
CONSOLE = "/console/"


class Who(msgspec.Struct, kw_only=True):
    actor: str
    kind: str
    name: str
    role: str
    approve_tools: list[str] = msgspec.field(default_factory=list)
    approve_agents: list[str] = msgspec.field(default_factory=list)


class LoginState(msgspec.Struct, kw_only=True):
    """What the console's login page needs: which ways in there are, and who the request is now (null: nobody)."""

    sso: bool
    sso_label: str = ""
    session_hours: float
    who: Who | None = None


class TokenLogin(msgspec.Struct):
    token: str  # a personal token, f7u_…


def _who(p: Principal) -> dict[str, Any]:
    return {
        "actor": p.actor,
        "kind": p.kind,
        "name": p.name,
        "role": p.role,
        "approve_tools": list(p.approve_tools),
        "approve_agents": list(p.approve_agents),
    }


def _secure(request: Request[Any, Any, Any]) -> bool:
    proto = (request.headers.get("x-forwarded-proto") or "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or proto == "https" or public_base(request).startswith("https://")


def _session_cookie(request: Request[Any, Any, Any], value: str, seconds: float) -> Cookie:
    return Cookie(
        key=SESSION_COOKIE,
        value=value,
        path="/",
        max_age=int(seconds),
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def _expired(request: Request[Any, Any, Any], key: str, path: str) -> Cookie:
    return Cookie(key=key, value="", path=path, max_age=0, httponly=True, samesite="strict", secure=_secure(request))


def return_route(value: str | None) -> str:
    """The console route (`/approvals/…?decision=approve`) a sign-in comes back to, or "" when `value` is not one.
    It goes after the console's `#`, so it cannot leave this origin; still, only a plain path of the console is
    kept (never `//host`, a backslash, control characters, or the sign-in page itself), as the console checks
    (console-spa/src/router.tsx safeReturn)."""
    if not value or len(value) > 2000 or not value.startswith("/") or value.startswith(("//", "/\\")):
        return ""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return ""
    path = value.split("?", 1)[0].rstrip("/")
    return "" if path == "/login" else value


def _sso(request: Request[Any, Any, Any]) -> SingleSignOn:
    sso: SingleSignOn | None = mesh_of(request).sso
    if sso is None:
        raise NotImplementedFeature("single sign-on is not configured (auth.oidc)")
    return sso


def _opened(request: Request[Any, Any, Any], user: User, method: str) -> None:
    mesh_of(request).events.record(
        tool="mesh.login", actor=user.actor, params={"method": method, "role": user.role}, policy_rule="login"
    )


@get(
    "/login",
    sync_to_thread=True,
    tags=["users"],
    security=PUBLIC,
    responses={200: ok(LoginState)},
    operation_id="LoginState",
    summary="LoginState",
    description="Which ways into the console this server offers, and who the request's credential proves.",
)
def login_state(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """Which ways into the console this server offers, and who the request's credential (a bearer or the session
    cookie) proves, if anyone: never a 401, so a login page can ask before anyone has logged in."""
    mesh = mesh_of(request)
    principal = mesh.identity.principal(
        request.headers.get("authorization"), peer_of(request), request.cookies.get(SESSION_COOKIE, "")
    )
    return {
        "sso": mesh.sso is not None,
        "sso_label": mesh.sso.label if mesh.sso is not None else "",
        "session_hours": mesh.settings.auth.session_hours,
        "who": _who(principal) if principal is not None else None,
    }


@post(
    "/login",
    status_code=200,
    operation_class=json_body(TokenLogin, required=True),
    sync_to_thread=True,
    tags=["users"],
    security=PUBLIC,
    responses=responses({200: ok(Who, "Logged in: the session cookie is set")}, *BODY, 401),
)
def login_with_token(request: Request[Any, Any, Any], body: RawBody) -> Response[dict[str, Any]]:
    """A local user's personal token (`f7u_…`) for a console session, so the token need not stay in the browser."""
    token = text_field(json_object(body), "token", strip=True)
    if not token:
        raise BadRequest("token is required: a personal token (f7u_…) from `flux7 user add` or rotate")
    mesh = mesh_of(request)
    user = mesh.users.authenticate(token) if looks_like_user_token(token) else None
    if user is None:
        raise Unauthorized("not a live personal token (f7u_…): unknown, rotated away, or its user disabled")
    seconds = mesh.settings.auth.session_hours * 3600
    session = mesh.users.open_session(user.name, seconds)
    _opened(request, user, "token")
    return Response(_who(user_principal(user)), cookies=[_session_cookie(request, session, seconds)])


@post(
    "/logout",
    status_code=204,
    sync_to_thread=True,
    tags=["users"],
    security=PUBLIC,
    responses={204: ok(None, "Logged out: the session is deleted and its cookie cleared")},
    operation_class=operation(drop=("201",)),
)
def logout(request: Request[Any, Any, Any]) -> Response[None]:
    """Ends the request's console session on the server and clears its cookie (nothing to end is no error)."""
    session = request.cookies.get(SESSION_COOKIE, "")
    mesh = mesh_of(request)
    if session:
        user = mesh.users.session_user(session)
        mesh.users.close_session(session)
        if user is not None:
            mesh.events.record(tool="mesh.logout", actor=user.actor, params={}, policy_rule="login")
    return Response(None, status_code=204, cookies=[_expired(request, SESSION_COOKIE, "/")])


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · flux7 console</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1c1f24; }}
main {{ max-width: 36rem; margin: 4rem auto; padding: 2rem; background: #fff; border: 1px solid #d5d9e0;
  border-radius: 8px; }}
h1 {{ font-size: 1.4rem; margin-top: 0; }}
a {{ color: #0b57d0; }}
@media (prefers-color-scheme: dark) {{
  body {{ background: #14161a; color: #e6e8eb; }}
  main {{ background: #1d2026; border-color: #3a3f48; }}
  a {{ color: #8ab4f8; }}
}}
</style>
</head>
<body>
<main>
<h1>{title}</h1>
<p id="why">{message}</p>
<p><a href="{console}#/login">Back to the console's sign-in page</a></p>
</main>
</body>
</html>
"""


def _page(status: int, title: str, message: str) -> Response[str]:
    text = _PAGE.format(title=html.escape(title), message=html.escape(message), console=CONSOLE)
    return Response(
        text, status_code=status, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"}
    )


_TITLES = {400: "Sign-in failed", 403: "Sign-in refused", 502: "The identity provider cannot be reached"}


@get(
    "/login/oidc",
    tags=["users"],
    security=PUBLIC,
    status_code=302,
    responses={
        302: ok(None, "To the identity provider's authorization endpoint (state, nonce, PKCE S256)"),
        **responses({}, 400, 501),
        502: ok(str, "The identity provider cannot be reached (an HTML page)", "text/html"),
    },
)
async def login_oidc(
    request: Request[Any, Any, Any],
    next_route: Annotated[
        str | None,
        QueryParameter(name="next", description="The console route to come back to once signed in (`/approvals/…`)"),
    ] = None,
) -> Response[Any]:
    """Starts a single sign-on: to the provider, with a short-lived cookie that ties its answer to this browser."""
    sso = _sso(request)
    try:
        started = await sso.begin(public_base(request) + CALLBACK)
    except Flux7Error as e:
        return _page(e.status_code, _TITLES.get(e.status_code, "Sign-in failed"), e.message)
    state = Cookie(
        key=STATE_COOKIE,
        value=started.state,
        path=CALLBACK,
        max_age=LOGIN_SECONDS,
        httponly=True,
        samesite="lax",  # the provider's redirect back is a cross-site navigation: Strict would not come back
        secure=_secure(request),
    )
    cookies = [state]
    route = return_route(next_route)
    if route:  # kept beside the state, read back by the callback only
        cookies.append(
            Cookie(
                key=NEXT_COOKIE,
                value=quote(route, safe=""),
                path=CALLBACK,
                max_age=LOGIN_SECONDS,
                httponly=True,
                samesite="lax",
                secure=_secure(request),
            )
        )
    return Response(
        None, status_code=302, headers={"Location": started.url, "Cache-Control": "no-store"}, cookies=cookies
    )


@get(
    CALLBACK,
    tags=["users"],
    security=PUBLIC,
    status_code=302,
    responses={
        302: ok(None, "Signed in: the session cookie is set, on to the console"),
        400: ok(
            str, "The sign-in cannot be trusted (state, ID token, the provider's error): an HTML page", "text/html"
        ),
        403: ok(str, "The user has no flux7 role, or is disabled: an HTML page", "text/html"),
        **responses({}, 501),
        502: ok(str, "The identity provider cannot be reached (an HTML page)", "text/html"),
    },
)
async def login_oidc_callback(request: Request[Any, Any, Any]) -> Response[Any]:
    """The provider's answer: the code exchanged, the ID token verified, the role mapped, a session opened."""
    sso = _sso(request)
    query = {k: v for k, v in request.query_params.items() if isinstance(v, str)}
    clear = [_expired(request, STATE_COOKIE, CALLBACK)]
    if NEXT_COOKIE in request.cookies:
        clear.append(_expired(request, NEXT_COOKIE, CALLBACK))
    try:
        user, session = await sso.finish(query, request.cookies.get(STATE_COOKIE, ""))
    except Flux7Error as e:
        page = _page(e.status_code, _TITLES.get(e.status_code, "Sign-in failed"), e.message)
        page.cookies.extend(clear)
        return page
    _opened(request, user, "oidc")
    route = return_route(unquote(request.cookies.get(NEXT_COOKIE, "")))
    location = CONSOLE + ("#" + route if route else "")
    cookies = [*clear, _session_cookie(request, session, sso.session_seconds)]
    return Response(None, status_code=302, headers={"Location": location, "Cache-Control": "no-store"}, cookies=cookies)


ROUTES = [login_state, login_with_token, logout, login_oidc, login_oidc_callback]
