"""flux7 as the OAuth 2.1 authorization server of /mcp (shared/auth/oauth.py, docs/managed-agents.md).

The protocol endpoints (`/.well-known/oauth-authorization-server`, `/oauth/register`, `/oauth/authorize`,
`/oauth/token`, `/oauth/revoke`) answer in OAuth's own shapes and need no credential: a client proves itself by
its registration, its PKCE verifier and its tokens. The consent (`/oauth/requests/{id}` and its approve/deny) and
the connections and clients lists are control plane: a human's credential, owners and admins to decide.
With `oauth.enabled: false` every route here is 404."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath, FromQuery, RawBody

from flux7.functions.approvals import json_object, text_field
from flux7.functions.auth import actor_of, control_plane, mesh_of, peer_of
from flux7.functions.oauth_openapi import (
    FORM,
    ClientView,
    ConnectionView,
    ConsentChoice,
    ConsentDecision,
    ConsentView,
    RegisteredClient,
    RegistrationRequest,
    RevokeForm,
    TokenAnswer,
    TokenForm,
    form_body,
    oauth_errors,
    query_parameters,
)
from flux7.functions.openapi import ADMIN, BODY, PUBLIC, json_body, ok, responses
from flux7.functions.wellknown import public_base
from flux7.shared.auth.oauth import OAuthAnswer, authorization_server_metadata
from flux7.shared.auth.oauth_clients import OAuthClient
from flux7.shared.auth.oauth_connections import Connection
from flux7.shared.errors import NotFound
from flux7.shared.json_depth import decode

__all__ = ["ROUTES"]

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def oauth_on(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard: every OAuth route is 404 with `oauth.enabled: false`."""
    if not mesh_of(conn).oauth.enabled:
        raise NotFound("OAuth is off on this server (oauth.enabled: false)")


def _send(answer: OAuthAnswer) -> Response[bytes]:
    headers = {k: v for k, v in answer.headers if k.lower() != "content-type"}
    headers.update(_NO_STORE)
    if answer.body == "":
        return Response(b"", status_code=answer.status, media_type="text/plain", headers=headers)
    return Response(msgspec.json.encode(answer.body), status_code=answer.status, headers=headers)


def _invalid(description: str) -> Response[bytes]:
    return _send(OAuthAnswer(400, {"error": "invalid_request", "error_description": description}, []))


def _credentials(request: Request[Any, Any, Any]) -> Mapping[str, str]:
    """The only header authlib reads: a confidential client's HTTP Basic credentials."""
    authorization = request.headers.get("authorization")
    return {"authorization": authorization} if authorization else {}


def _form(request: Request[Any, Any, Any], body: bytes) -> dict[str, list[str]] | None:
    """An OAuth request body (application/x-www-form-urlencoded, RFC 6749 appendix B), or None."""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media != FORM:
        return None
    try:
        return parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=100)
    except (UnicodeDecodeError, ValueError):
        return None


# --- discovery and the protocol -------------------------------------------------------------------------------


@get(
    "/.well-known/oauth-authorization-server",
    guards=[oauth_on],
    sync_to_thread=False,
    tags=["oauth"],
    security=PUBLIC,
    responses=responses({200: ok(dict[str, Any], "RFC 8414 authorization server metadata")}, 404),
    operation_id="WellKnownOauthAuthorizationServer",
    summary="OAuth authorization server metadata",
)
def server_metadata(request: Request[Any, Any, Any]) -> Response[bytes]:
    settings = mesh_of(request).settings.oauth
    doc = authorization_server_metadata(public_base(request), metadata_documents=settings.client_metadata_documents)
    return Response(msgspec.json.encode(doc), media_type="application/json", headers={"Cache-Control": "max-age=300"})


@post(
    "/oauth/register",
    guards=[oauth_on],
    status_code=201,
    sync_to_thread=True,
    tags=["oauth"],
    security=PUBLIC,
    summary="Register an OAuth client (RFC 7591)",
    operation_class=json_body(RegistrationRequest, required=True, description="The client's metadata"),
    responses={
        201: ok(RegisteredClient, "Registered: a client id (and a secret for a confidential client, shown once)"),
        **oauth_errors(400, 404, 429),
    },
)
def register(request: Request[Any, Any, Any], body: RawBody) -> Response[bytes]:
    try:
        data = decode(body) if body.strip() else None
    except msgspec.DecodeError:
        return _invalid("the body is a JSON object of client metadata")
    oauth = mesh_of(request).oauth
    return _send(oauth.register(public_base(request), _credentials(request), data, peer=peer_of(request)))


@get(
    "/oauth/authorize",
    guards=[oauth_on],
    status_code=302,
    sync_to_thread=True,
    tags=["oauth"],
    security=PUBLIC,
    summary="Authorization endpoint: on to the console's consent page",
    operation_class=query_parameters(
        ("response_type", "code"),
        ("client_id", "The registered client"),
        ("redirect_uri", "One of the client's redirect URIs, exactly"),
        ("code_challenge", "PKCE: BASE64URL(SHA256(code_verifier))"),
        ("code_challenge_method", "S256 (plain is refused)"),
        ("state", "Returned to the client as sent"),
        ("scope", "Requested scopes (the one granted is `mcp`)"),
        ("resource", "RFC 8707: this server's MCP URL"),
    ),
    responses={
        302: ok(None, "To the consent page; or to the client's redirect URI with an error"),
        **oauth_errors(400, 401, 404),
    },
)
def authorize(request: Request[Any, Any, Any]) -> Response[bytes]:
    try:
        query = parse_qs(request.url.query, keep_blank_values=True, max_num_fields=100)
    except ValueError:
        return _invalid("too many parameters")
    return _send(mesh_of(request).oauth.authorize(public_base(request), {}, query))


@post(
    "/oauth/token",
    guards=[oauth_on],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=PUBLIC,
    summary="Token endpoint: a code (with its PKCE verifier) or a refresh token for tokens",
    operation_class=form_body(TokenForm, "authorization_code or refresh_token grant (RFC 6749 section 4.1.3, 6)"),
    responses={200: ok(TokenAnswer, "Tokens (never cached)"), **oauth_errors(400, 401, 404)},
)
def token(request: Request[Any, Any, Any], body: RawBody) -> Response[bytes]:
    form = _form(request, body)
    if form is None:
        return _invalid("the body is application/x-www-form-urlencoded")
    return _send(mesh_of(request).oauth.token(public_base(request), _credentials(request), form))


@post(
    "/oauth/revoke",
    guards=[oauth_on],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=PUBLIC,
    summary="Revoke a token, and the connection it belongs to (RFC 7009)",
    operation_class=form_body(RevokeForm, "The token (access or refresh) and the client's credentials"),
    responses={200: ok(dict[str, Any], "Revoked (or unknown: the same answer)"), **oauth_errors(400, 401, 404)},
)
def revoke(request: Request[Any, Any, Any], body: RawBody) -> Response[bytes]:
    form = _form(request, body)
    if form is None:
        return _invalid("the body is application/x-www-form-urlencoded")
    return _send(mesh_of(request).oauth.revoke(public_base(request), _credentials(request), form))


# --- consent (control plane) ----------------------------------------------------------------------------------


@get(
    "/oauth/requests/{request_id:str}",
    guards=[oauth_on, control_plane],
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="An authorization request waiting for consent",
    responses=responses({200: ok(ConsentView, "Which client wants to act as which agent")}, 400, 401, 403, 404),
)
def consent_request(request: Request[Any, Any, Any], request_id: FromPath[str], agent: FromQuery[str] = "") -> Any:
    return mesh_of(request).oauth.consent_view(request_id, agent)


def _decide(request: Request[Any, Any, Any], request_id: str, body: bytes, decision: Any) -> dict[str, Any]:
    agent = text_field(json_object(body), "agent", strip=True)
    return mesh_of(request).oauth.decide(request_id, actor_of(request), decision, agent)


_DECIDED = responses(
    {200: ok(ConsentDecision, "Decided: `redirect_to` is where the browser goes next")}, *BODY, 401, 403, 404, 409
)


@post(
    "/oauth/requests/{request_id:str}/approve",
    guards=[oauth_on, control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Approve: the client gets a code for a connection acting as the chosen agent",
    operation_class=json_body(ConsentChoice, description="The agent id (default: the proposed one)"),
    responses=_DECIDED,
)
def approve(request: Request[Any, Any, Any], request_id: FromPath[str], body: RawBody) -> dict[str, Any]:
    return _decide(request, request_id, body, "approved")


@post(
    "/oauth/requests/{request_id:str}/deny",
    guards=[oauth_on, control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Deny: the client gets access_denied",
    operation_class=json_body(ConsentChoice, description="Ignored"),
    responses=_DECIDED,
)
def deny(request: Request[Any, Any, Any], request_id: FromPath[str], body: RawBody) -> dict[str, Any]:
    return _decide(request, request_id, body, "denied")


# --- connections and clients (control plane) ------------------------------------------------------------------


def _connection(c: Connection) -> dict[str, Any]:
    return {**msgspec.to_builtins(c), "state": c.state()}


@get(
    "/oauth/tokens",
    guards=[oauth_on, control_plane],
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="OAuth connections: client, agent, consenting human, last use, expiry",
    responses=responses({200: ok(list[ConnectionView], "Every connection (never a token)")}, 400, 401, 403, 404),
)
def list_connections(
    request: Request[Any, Any, Any], agent: FromQuery[str] = "", client: FromQuery[str] = ""
) -> list[dict[str, Any]]:
    return [_connection(c) for c in mesh_of(request).oauth.connections.list(agent_id=agent, client_id=client)]


@delete(
    "/oauth/tokens/{ref:str}",
    guards=[oauth_on, control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Revoke an OAuth connection (by its id, otk_…, or one of its tokens)",
    responses=responses({200: ok(ConnectionView, "Revoked")}, 400, 401, 403, 404),
)
def revoke_connection(request: Request[Any, Any, Any], ref: FromPath[str]) -> dict[str, Any]:
    return _connection(mesh_of(request).oauth.revoke_connection(ref, actor_of(request)))


def _client(c: OAuthClient) -> dict[str, Any]:
    return c.view()


@get(
    "/oauth/clients",
    guards=[oauth_on, control_plane],
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Registered OAuth clients",
    responses=responses({200: ok(list[ClientView], "Every registered client")}, 401, 403, 404),
)
def list_clients(request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
    return [_client(c) for c in mesh_of(request).oauth.clients.list()]


@delete(
    "/oauth/clients/{client_id:str}",
    guards=[oauth_on, control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Delete an OAuth client and revoke its connections (it must register again)",
    responses=responses({200: ok(ClientView, "Deleted")}, 400, 401, 403, 404),
)
def delete_client(request: Request[Any, Any, Any], client_id: FromPath[str]) -> dict[str, Any]:
    return _client(mesh_of(request).oauth.delete_client(client_id, actor_of(request)))


@delete(
    "/oauth/clients",
    guards=[oauth_on, control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["oauth"],
    security=ADMIN,
    summary="Delete an OAuth client named in the query, a metadata document's URL included, and revoke its connections",
    responses=responses({200: ok(ClientView, "Deleted")}, 400, 401, 403, 404),
)
def delete_client_named(request: Request[Any, Any, Any], client_id: FromQuery[str]) -> dict[str, Any]:
    """The same as DELETE /oauth/clients/{client_id}, for an id a path cannot carry (an https URL: its next
    request fetches its document again)."""
    return _client(mesh_of(request).oauth.delete_client(client_id, actor_of(request)))


ROUTES = [
    server_metadata,
    register,
    authorize,
    token,
    revoke,
    consent_request,
    approve,
    deny,
    list_connections,
    revoke_connection,
    list_clients,
    delete_client,
    delete_client_named,
]
