"""flux7 as the OAuth 2.1 authorization server of its remote MCP endpoint (docs/managed-agents.md).

A managed agent's platform discovers this server from /mcp's 401, registers itself, and sends a human's browser to
`/oauth/authorize`. That request waits (shared/auth/oauth_connections.py) until a named human with the right role
approves it on the console's consent page, picking the agent id the connection will act as, or denies it. The
client then holds tokens that make it that agent on /mcp (and /tool, /decide): governed by the same pipeline,
policies, approvals and limits as any agent, traced under that id. Every decision and revocation is an event."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from flux7.shared.auth.oauth_clients import AUTH_METHODS, GRANT_TYPES, SCOPE, ClientStore, OAuthClient
from flux7.shared.auth.oauth_clients import proposed_agent_id as _proposed
from flux7.shared.auth.oauth_connections import Connection, ConnectionStore, Consent
from flux7.shared.auth.oauth_requests import ConsentRequest, RequestStore
from flux7.shared.auth.redirect_uris import redirect_target
from flux7.shared.auth.tokens import validate_agent_id
from flux7.shared.errors import BadRequest, Conflict
from flux7.shared.gate.audit import EventLog
from flux7.shared.globs import glob_match
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database

if TYPE_CHECKING:  # authlib is imported on the first OAuth request, not at start (DESIGN "Serverless-friendly")
    from flux7.shared.auth.oauth_server import TokenServer

__all__ = ["CONSENT_PAGE", "OAuth", "OAuthAnswer", "authorization_server_metadata"]

log = logging.getLogger("flux7.oauth")

CONSENT_PAGE = "/console/#/oauth/consent"
_REQUEST_KEYS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
)


def authorization_server_metadata(issuer: str, *, metadata_documents: bool = True) -> dict[str, Any]:
    """RFC 8414 metadata of this server, whose issuer is the public base URL (no path); `metadata_documents`:
    whether an https URL is taken as a client id (shared/auth/client_metadata.py)."""
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/oauth/authorize",
        "token_endpoint": f"{issuer}/oauth/token",
        "registration_endpoint": f"{issuer}/oauth/register",
        "revocation_endpoint": f"{issuer}/oauth/revoke",
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": list(GRANT_TYPES),
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,  # RFC 9207: every redirect carries `iss`
        "client_id_metadata_document_supported": metadata_documents,
    }


class OAuthAnswer(msgspec.Struct, frozen=True):
    """What an OAuth endpoint answers: a status, a JSON object (or "" for a redirect) and headers."""

    status: int
    body: dict[str, Any] | str
    headers: list[tuple[str, str]]

    @property
    def location(self) -> str:
        return next((v for k, v in self.headers if k.lower() == "location"), "")


def _add_params(uri: str, params: dict[str, str]) -> str:
    parts = urlsplit(uri)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), *params.items()])
    return urlunsplit(parts._replace(query=query))


def _with_issuer(answer: OAuthAnswer, issuer: str) -> OAuthAnswer:
    """RFC 9207: a redirect to the client names the issuer, so a client talking to several servers cannot be
    sent another server's code (mix-up attacks)."""
    location = answer.location
    if not location:
        return answer
    headers = [(k, v) for k, v in answer.headers if k.lower() != "location"]
    return OAuthAnswer(answer.status, answer.body, [*headers, ("Location", _add_params(location, {"iss": issuer}))])


class OAuth:
    """The authorization server and its consent, over the database. `policies_for(agent)` names the policies
    that would govern an agent (the consent page shows them)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        events: EventLog,
        policies_for: Callable[[str], list[dict[str, str]]] = lambda _agent: [],
    ) -> None:
        self.settings = settings
        self.clients = ClientStore(db)
        self.connections = ConnectionStore(db)
        self.requests = RequestStore(db)
        self._events = events
        self._policies_for = policies_for
        self._server: TokenServer | None = None

    @property
    def server(self) -> TokenServer:
        if self._server is None:
            from flux7.shared.auth.oauth_server import TokenServer

            self._server = TokenServer(
                self.settings.oauth,
                self.clients,
                self.connections,
                resource=lambda request: f"{request.issuer}/mcp",
                on_reuse=self._on_reuse,
                on_client_revoke=self._on_client_revoke,
            )
        return self._server

    @property
    def enabled(self) -> bool:
        return self.settings.oauth.enabled

    # -- the protocol endpoints ---------------------------------------------------------------------------

    def _answer(self, run: Callable[[], OAuthAnswer]) -> OAuthAnswer:
        """An endpoint's answer; an OAuth error in its RFC 6749 shape. A client that does not exist (deleted, or
        from another server) is 401 `invalid_client`, which tells a client to register again."""
        from authlib.oauth2.rfc6749 import InvalidRequestError, OAuth2Error

        try:
            answer = run()
        except OAuth2Error as e:
            answer = self.server.handle_error_response(None, e)
        except (ValueError, TypeError, KeyError) as e:  # a parameter authlib could not even describe
            log.info("OAuth request refused: %r", e)
            answer = self.server.handle_error_response(None, InvalidRequestError("malformed request"))
        if isinstance(answer.body, dict) and answer.body.get("error") == "invalid_client":
            answer = OAuthAnswer(401, answer.body, answer.headers)
        return answer

    def register(self, issuer: str, headers: Mapping[str, str], data: Any, *, peer: str = "") -> OAuthAnswer:
        """RFC 7591 registration of a client from its JSON metadata, sent from address `peer`."""

        from authlib.oauth2.rfc6749 import InvalidRequestError

        from flux7.shared.auth.oauth_server import OAuthJsonRequest

        def run() -> OAuthAnswer:
            if not isinstance(data, dict) or not data:
                raise InvalidRequestError("the body is a JSON object of client metadata")
            request = OAuthJsonRequest(issuer, "/oauth/register", headers, data, peer=peer)
            answer: OAuthAnswer = self.server.create_endpoint_response("client_registration", request)
            if answer.status == 201 and isinstance(answer.body, dict):
                log.info(
                    "OAuth client registered: %s (%s)", answer.body.get("client_id"), answer.body.get("client_name")
                )
            return answer

        return self._answer(run)

    def authorize(self, issuer: str, headers: Mapping[str, str], query: Mapping[str, list[str]]) -> OAuthAnswer:
        """GET /oauth/authorize: validate the request, then send the browser to the consent page. An error the
        client can be told (its redirect URI checked) goes back to it; any other is answered here (400)."""
        from authlib.oauth2.rfc6749 import OAuth2Error

        from flux7.shared.auth.oauth_server import OAuthHttpRequest

        def run() -> OAuthAnswer:
            request = OAuthHttpRequest("GET", issuer, "/oauth/authorize", headers, query)
            try:
                self.server.get_consent_grant(request)
            except OAuth2Error as e:
                return _with_issuer(self.server.handle_error_response(request, e), issuer)
            client: OAuthClient = request.client
            params = {k: request.payload.data[k] for k in _REQUEST_KEYS if k in request.payload.data}
            waiting = self.requests.open_request(
                client.client_id, issuer, params, _proposed(client.name), self.settings.oauth.consent_seconds
            )
            return OAuthAnswer(302, "", [("Location", f"{issuer}{CONSENT_PAGE}?request={waiting.id}")])

        return self._answer(run)

    def token(self, issuer: str, headers: Mapping[str, str], form: Mapping[str, list[str]]) -> OAuthAnswer:
        """POST /oauth/token: a code for tokens (PKCE), or a refresh token for new ones (rotation)."""
        from flux7.shared.auth.oauth_server import OAuthHttpRequest

        return self._answer(
            lambda: self.server.create_token_response(
                OAuthHttpRequest("POST", issuer, "/oauth/token", headers, {}, form)
            )
        )

    def revoke(self, issuer: str, headers: Mapping[str, str], form: Mapping[str, list[str]]) -> OAuthAnswer:
        """POST /oauth/revoke (RFC 7009): a client revokes its connection by one of its tokens."""
        from flux7.shared.auth.oauth_server import OAuthHttpRequest

        def run() -> OAuthAnswer:
            request = OAuthHttpRequest("POST", issuer, "/oauth/revoke", headers, {}, form)
            answer: OAuthAnswer = self.server.create_endpoint_response("revocation", request)
            return answer

        return self._answer(run)

    # -- consent --------------------------------------------------------------------------------------------

    def _agent(self, request: ConsentRequest, agent: str) -> str:
        agent = validate_agent_id(agent.strip() or request.agent_id)
        if any(glob_match(p, agent) for p in self.settings.supervisor.supervisor_agents):
            raise BadRequest(
                f"{agent} is a supervisor agent (supervisor.supervisor_agents): an OAuth connection never acts as "
                "a supervisor; pick another agent id"
            )
        return agent

    def consent_view(self, request_id: str, agent: str = "") -> dict[str, Any]:
        """What the consent page shows: which client wants to act as which agent, under which policies."""
        request = self.requests.get_request(request_id)
        client = self.clients.get(request.client_id)
        shown = agent.strip() or request.agent_id
        redirect_uri = request.params.get("redirect_uri") or (client.get_default_redirect_uri() if client else "")
        view: dict[str, Any] = {
            "id": request.id,
            "state": request.state(),
            "client": client.view() if client is not None else {"client_id": request.client_id, "deleted": True},
            "redirect_uri": redirect_uri or "",
            "redirect_host": redirect_target(redirect_uri or ""),
            "agent": shown,
            "proposed_agent": request.agent_id,
            "scopes": [SCOPE],
            "requested_scope": request.params.get("scope", ""),
            "resource": f"{request.issuer}/mcp",
            "policies": self._policies_for(shown),
            "active_connections": self.connections.active_count(shown),
            "created_at": request.created_at,
            "expires_at": request.expires_at,
        }
        if request.decided_by:
            view.update(decided_by=request.decided_by, decided_at=request.decided_at)
        return view

    def decide(
        self, request_id: str, actor: str, decision: Literal["approved", "denied"], agent: str = ""
    ) -> dict[str, Any]:
        """A human's decision on a waiting request: the code (approved) or `access_denied` (denied), as the URL
        the browser goes to next, the client's redirect URI. Decided once; recorded as an event."""
        from authlib.oauth2.rfc6749 import OAuth2Error

        from flux7.shared.auth.oauth_server import OAuthHttpRequest

        waiting = self.requests.get_request(request_id)
        chosen = self._agent(waiting, agent) if decision == "approved" else waiting.agent_id
        query = {k: [v] for k, v in waiting.params.items()}
        request = OAuthHttpRequest("GET", waiting.issuer, "/oauth/authorize", {}, query)
        try:
            grant = self.server.get_consent_grant(request)
        except OAuth2Error as e:  # the client was deleted, or changed, since it asked
            raise Conflict(f"the authorization request can no longer be granted: {e.description or e.error}") from None
        waiting = self.requests.decide_request(request_id, decision, actor)
        consent = Consent(agent_id=chosen, granted_by=actor, request_id=request_id) if decision == "approved" else None
        answer = self.server.create_authorization_response(request, grant_user=consent, grant=grant)
        redirect_to = _with_issuer(answer, waiting.issuer).location
        client: OAuthClient = request.client
        params = {
            "request": request_id,
            "client_id": client.client_id,
            "client_name": client.name,
            "redirect_host": redirect_target(redirect_to),
            "agent": chosen,
        }
        event = "mesh.oauth_approve" if decision == "approved" else "mesh.oauth_deny"
        self._events.record(tool=event, actor=actor, params=params, policy_rule=event[5:], agent_id=chosen)
        return {"id": request_id, "state": waiting.state(), "agent": chosen, "redirect_to": redirect_to}

    # -- connections and clients on the control plane -------------------------------------------------------

    def revoke_connection(self, ref: str, actor: str) -> Connection:
        connection = self.connections.revoke(ref, by=actor)
        self._record_revoke(connection, actor)
        return connection

    def delete_client(self, client_id: str, actor: str) -> OAuthClient:
        client = self.clients.delete(client_id, by=actor)
        params = {"client_id": client.client_id, "client_name": client.name}
        self._events.record(
            tool="mesh.oauth_client_delete", actor=actor, params=params, policy_rule="oauth_client_delete"
        )
        return client

    def _record_revoke(self, connection: Connection, actor: str) -> None:
        params = {"id": connection.id, "client_id": connection.client_id, "agent": connection.agent_id}
        self._events.record(
            tool="mesh.oauth_revoke",
            actor=actor,
            params=params,
            policy_rule="oauth_revoke",
            agent_id=connection.agent_id,
        )

    def _on_client_revoke(self, connection: Connection, client: OAuthClient) -> None:
        actor = f"oauth-client:{client.client_id}"
        if connection.revoked_at is None:
            self._record_revoke(self.connections.revoke(connection.id, by=actor), actor)

    def _on_reuse(self, connection_id: str, what: str) -> None:
        """A spent code or refresh token came back: someone else may hold it, so its connection was revoked."""
        log.warning("OAuth %s used twice: connection %s revoked", what, connection_id)
        by = "system:code-reuse" if what == "authorization code" else "system:refresh-reuse"
        params = {"id": connection_id, "reason": f"{what} used twice"}
        self._events.record(tool="mesh.oauth_revoke", actor=by, params=params, policy_rule="oauth_revoke")
