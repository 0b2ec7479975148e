"""flux7's OAuth 2.1 authorization server on authlib's server components: the authorization code grant with PKCE
(S256 only, RFC 7636), refresh-token rotation, dynamic client registration (RFC 7591), revocation (RFC 7009) and
resource indicators (RFC 8707). No web framework here: the HTTP edge (functions/oauth.py) builds an
`OAuthHttpRequest` and sends back the `OAuthAnswer`; authlib sees only those.

What authlib leaves to the server, and flux7 decides: every client is checked against exact redirect URIs; a code
and a refresh token are good once; the one scope is `mcp`; the one resource (audience) is this server's `/mcp`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import msgspec
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    InvalidGrantError,
    InvalidRequestError,
    JsonPayload,
    JsonRequest,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge

from flux7.shared.auth.client_metadata import ClientMetadataDocuments, client_metadata, is_metadata_url
from flux7.shared.auth.oauth import OAuthAnswer
from flux7.shared.auth.oauth_clients import (
    AUTH_METHODS,
    GRANT_TYPES,
    ClientStore,
    OAuthClient,
    RegistrationLimitError,
)
from flux7.shared.auth.oauth_connections import (
    ACCESS_PREFIX,
    REFRESH_PREFIX,
    AuthorizationCode,
    Connection,
    ConnectionStore,
    RefreshRecord,
    new_token,
)
from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.settings import OAuthSettings

__all__ = ["InvalidTargetError", "OAuthHttpRequest", "OAuthJsonRequest", "TokenServer", "same_resource"]

Reuse = Callable[[str, str], None]  # (connection id, what was reused): a revoked family, to be recorded


class InvalidTargetError(OAuth2Error):
    """RFC 8707 section 2: a resource this server does not issue tokens for."""

    error = "invalid_target"


class _Headers(dict[str, str]):
    """Request headers, looked up case-insensitively (authlib asks for `Authorization`)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__((k.lower(), v) for k, v in headers.items())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class _Payload(OAuth2Payload):
    def __init__(self, values: Mapping[str, list[str]]) -> None:
        self._data = {k: v[0] for k, v in values.items() if v}
        self._datalist = defaultdict(list, {k: list(v) for k, v in values.items()})

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return self._datalist


class OAuthHttpRequest(OAuth2Request):
    """One request to the authorization or token endpoint: its query (GET) or form (POST) parameters.
    `issuer` is this server's public base URL as the client knows it. Raises OAuth2Error (insecure_transport)
    when that is plain HTTP off loopback."""

    def __init__(
        self,
        method: str,
        issuer: str,
        path: str,
        headers: Mapping[str, str],
        query: Mapping[str, list[str]],
        form: Mapping[str, list[str]] | None = None,
    ) -> None:
        super().__init__(method, issuer + path, headers=_Headers(headers))
        self.issuer = issuer
        self._query = _Payload(query)
        self._form = _Payload(form or {})
        self.payload = self._query if method == "GET" else self._form

    @property
    def args(self) -> dict[str, str]:
        return self._query.data

    @property
    def form(self) -> dict[str, str]:
        return self._form.data


class _JsonPayload(JsonPayload):
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def data(self) -> dict[str, Any]:
        return self._data


class OAuthJsonRequest(JsonRequest):
    """A registration request (RFC 7591): its JSON object, and the address it came from (`peer`)."""

    def __init__(
        self, issuer: str, path: str, headers: Mapping[str, str], data: dict[str, Any], *, peer: str = ""
    ) -> None:
        super().__init__("POST", issuer + path, _Headers(headers))
        self.issuer = issuer
        self.peer = peer
        self.payload = _JsonPayload(data)


class TooManyRegistrationsError(OAuth2Error):
    """429 with Retry-After: RFC 7591 names no error for it, so the error says what it is."""

    error = "too_many_requests"
    status_code = 429

    def __init__(self, description: str, retry_after: int) -> None:
        super().__init__(description=description)
        self.retry_after = retry_after

    def get_headers(self) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = super().get_headers()
        return [*headers, ("Retry-After", str(self.retry_after))]


def same_resource(given: str, expected: str) -> bool:
    """RFC 8707 resource indicators compared as URIs: scheme and host case-insensitive, a trailing slash ignored."""
    try:
        a, b = urlsplit(given), urlsplit(expected)
    except ValueError:
        return False
    if a.fragment or a.query:
        return False
    return (a.scheme.lower(), a.netloc.lower(), a.path.rstrip("/")) == (
        b.scheme.lower(),
        b.netloc.lower(),
        b.path.rstrip("/"),
    )


def _check_resource(request: Any, expected: str) -> None:
    for resource in request.payload.datalist.get("resource", []):
        if not same_resource(resource, expected):
            raise InvalidTargetError(f"this server issues tokens for {expected} only")


class _Pkce(CodeChallenge):
    """PKCE is required, and only S256: a missing challenge or `plain` is refused at the authorization endpoint,
    a missing or wrong verifier at the token endpoint."""

    DEFAULT_CODE_CHALLENGE_METHOD = "S256"
    SUPPORTED_CODE_CHALLENGE_METHOD: ClassVar[list[str]] = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: Any) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256 (plain is refused)")
        super().validate_code_challenge(grant, redirect_uri)


class _ResourceIndicator:
    """RFC 8707: a `resource` other than this server's /mcp is refused, at both endpoints."""

    def __init__(self, expected: Callable[[Any], str]) -> None:
        self._expected = expected

    def __call__(self, grant: Any) -> None:
        grant.register_hook("after_validate_authorization_request_payload", self._check)
        grant.register_hook("after_validate_token_request", self._check)

    def _check(self, grant: Any, _result: Any = None) -> None:
        _check_resource(grant.request, self._expected(grant.request))


_CLIENT_AUTH: list[str] = ["client_secret_basic", "client_secret_post", "none"]


class _CodeGrant(AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = _CLIENT_AUTH

    def save_authorization_code(self, code: str, request: Any) -> None:
        data = request.payload.data
        params = {
            "scope": request.scope,
            "resource": self.server.resource(request),
            "code_challenge": data["code_challenge"],
            "code_challenge_method": data["code_challenge_method"],
        }
        redirect_uri = request.payload.redirect_uri or ""
        self.server.connections.save_code(code, request.client.client_id, redirect_uri, params, request.user)

    def query_authorization_code(self, code: str, client: OAuthClient) -> AuthorizationCode | None:
        connections: ConnectionStore = self.server.connections
        record, revoked = connections.take_code(code, client.client_id)
        if revoked:
            self.server.on_reuse(revoked, "authorization code")
        return record

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        """Nothing: the code was marked used when it was taken, so a second exchange finds it spent."""

    def authenticate_user(self, authorization_code: AuthorizationCode) -> Any:
        return authorization_code.consent


class _RefreshGrant(RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = _CLIENT_AUTH
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: every refresh answers a new refresh token

    def validate_token_request(self) -> None:
        _check_resource(self.request, self.server.resource(self.request))
        super().validate_token_request()

    def _validate_request_token(self, client: OAuthClient) -> RefreshRecord:
        refresh_token = self.request.form.get("refresh_token")
        if refresh_token is None:
            raise InvalidRequestError("Missing 'refresh_token' in request.")
        connections: ConnectionStore = self.server.connections
        record, revoked = connections.take_refresh(refresh_token, client.client_id)
        if revoked:
            self.server.on_reuse(revoked, "refresh token")
        if record is None:
            raise InvalidGrantError("the refresh token is unknown, expired, revoked or already used")
        return record

    def _validate_token_scope(self, token: RefreshRecord) -> None:
        """Whatever scope a refresh asks for, the connection keeps the one the human consented to."""

    def issue_token(self, user: Any, refresh_token: RefreshRecord) -> dict[str, Any]:
        token: dict[str, Any] = self.generate_token(
            user=user, scope=refresh_token.get_scope(), include_refresh_token=True
        )
        return token

    def authenticate_refresh_token(self, refresh_token: str) -> RefreshRecord | None:  # pragma: no cover
        raise NotImplementedError  # _validate_request_token takes the token with its client

    def authenticate_user(self, refresh_token: RefreshRecord) -> Any:
        return refresh_token.consent

    def revoke_old_credential(self, refresh_token: RefreshRecord) -> None:
        """Nothing: the refresh token was rotated when it was taken."""


class _Revocable(msgspec.Struct, frozen=True):
    connection: Connection

    def check_client(self, client: OAuthClient) -> bool:
        return self.connection.client_id == client.client_id


class _Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = _CLIENT_AUTH

    def query_token(self, token_string: str, token_type_hint: str | None) -> _Revocable | None:
        if not isinstance(token_string, str) or not token_string.startswith((ACCESS_PREFIX, REFRESH_PREFIX)):
            return None
        try:
            return _Revocable(self.server.connections.find(token_string))
        except (NotFound, BadRequest):  # unknown: RFC 7009 answers 200 all the same
            return None

    def revoke_token(self, token: _Revocable, request: Any) -> None:
        self.server.on_client_revoke(token.connection, request.client)


class _Registration(ClientRegistrationEndpoint):
    """Open registration: anyone may register a client, which may do nothing until a human consents."""

    def authenticate_token(self, request: Any) -> bool:
        return True

    def get_server_metadata(self) -> dict[str, Any]:
        # No scopes_supported here: clients register scopes of their own (Claude: `claudeai`); what is granted is
        # decided at the consent (shared/auth/oauth_clients.py get_allowed_scope).
        return {
            "response_types_supported": ["code"],
            "grant_types_supported": list(GRANT_TYPES),
            "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        }

    def extract_client_metadata(self, request: Any) -> dict[str, Any]:
        request.payload = _JsonPayload(client_metadata(request.payload.data, self.server.settings.redirect_schemes))
        metadata: dict[str, Any] = super().extract_client_metadata(request)
        return metadata

    def generate_client_id(self, request: Any) -> str:
        return ClientStore.new_client_id()

    def generate_client_secret(self, request: Any) -> str | None:
        method = request.payload.data.get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else new_token("f7s_")

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> OAuthClient:
        answered = {**client_metadata, **{k: v for k, v in client_info.items() if k != "client_secret"}}
        if client_info.get("client_secret") is None:
            answered.pop("client_secret_expires_at", None)
        try:
            client: OAuthClient = self.server.clients.register(
                client_info["client_id"],
                answered,
                client_info.get("client_secret"),
                registered_from=request.peer,
                per_minute=self.server.settings.registrations_per_minute,
            )
        except RegistrationLimitError as e:
            raise TooManyRegistrationsError(str(e), e.retry_after) from None
        return client

    def create_registration_response(self, request: Any) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        status, body, headers = super().create_registration_response(request)
        if body.get("client_secret") is None:  # a public client has no secret, and no secret expiry
            body.pop("client_secret", None)
            body.pop("client_secret_expires_at", None)
        return status, body, headers


class TokenServer(AuthorizationServer):
    """authlib's AuthorizationServer over flux7's stores. `resource(request)` is the audience a request's tokens
    are bound to; `on_reuse` and `on_client_revoke` let the owner record what the server revoked."""

    def __init__(
        self,
        settings: OAuthSettings,
        clients: ClientStore,
        connections: ConnectionStore,
        resource: Callable[[Any], str],
        on_reuse: Reuse,
        on_client_revoke: Callable[[Connection, OAuthClient], None],
    ) -> None:
        super().__init__(scopes_supported=None)
        self.settings = settings
        self.clients = clients
        self.connections = connections
        self.resource = resource
        self.on_reuse = on_reuse
        self.on_client_revoke = on_client_revoke
        self.documents = ClientMetadataDocuments(settings, clients) if settings.client_metadata_documents else None
        self.register_grant(_CodeGrant, [_Pkce(required=True), _ResourceIndicator(resource)])
        self.register_grant(_RefreshGrant)
        self.register_endpoint(_Revocation)
        self.register_endpoint(_Registration)
        self.register_token_generator("default", self._generate)

    def _generate(
        self,
        grant_type: str,
        client: OAuthClient,
        user: Any = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        token: dict[str, Any] = {
            "token_type": "Bearer",
            "access_token": new_token(ACCESS_PREFIX),
            "expires_in": self.settings.access_token_seconds,
            "scope": scope or "",
        }
        if include_refresh_token:
            token["refresh_token"] = new_token(REFRESH_PREFIX)
        return token

    def query_client(self, client_id: str) -> OAuthClient | None:
        if is_metadata_url(client_id):  # a Client ID Metadata Document: fetched, or refused with the reason
            return self.documents.client(client_id) if self.documents is not None else None
        return self.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        seconds = float(self.settings.refresh_token_seconds)
        if request.authorization_code is not None:
            code = request.form["code"]
            self.connections.start(code, token, request.authorization_code, refresh_seconds=seconds)
        else:
            self.connections.extend(request.refresh_token.connection_id, token, refresh_seconds=seconds)

    def create_oauth2_request(self, request: Any) -> Any:
        return request

    def create_json_request(self, request: Any) -> Any:
        return request

    def handle_response(self, status: int, body: Any, headers: Any) -> OAuthAnswer:
        return OAuthAnswer(status, body if isinstance(body, dict) else str(body or ""), [(k, v) for k, v in headers])

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """No signals: what is worth recording is recorded by the callbacks."""
