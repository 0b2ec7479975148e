"""The wire shapes of the OAuth routes (functions/oauth.py) for the OpenAPI document: the protocol's own bodies
(RFC 6749, 7591, 7009, 8414; errors are `{"error": "<code>", "error_description": "…"}`, not the REST routes'
`{"error": "<why>"}`), and the consent and connections views the console reads."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar._openapi.schema_generation import SchemaCreator
from litestar._openapi.schema_generation.plugins import openapi_schema_plugins
from litestar.enums import ParamType
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, Parameter, Reference, RequestBody, Schema
from litestar.typing import FieldDefinition

from flux7.functions.openapi import operation

__all__ = [
    "FORM",
    "ClientView",
    "ConnectionView",
    "ConsentChoice",
    "ConsentDecision",
    "ConsentView",
    "OAuthErrorBody",
    "RegisteredClient",
    "RegistrationRequest",
    "RevokeForm",
    "TokenAnswer",
    "TokenForm",
    "form_body",
    "oauth_errors",
    "query_parameters",
]

FORM = "application/x-www-form-urlencoded"


class OAuthErrorBody(msgspec.Struct, kw_only=True):
    """An OAuth error (RFC 6749 section 5.2, RFC 7591 section 3.2.2)."""

    error: str
    error_description: str = ""


class RegistrationRequest(msgspec.Struct, kw_only=True):
    """RFC 7591 client metadata (others are accepted and ignored)."""

    redirect_uris: list[str]
    client_name: str = ""
    token_endpoint_auth_method: str = "client_secret_basic"
    grant_types: list[str] = []
    response_types: list[str] = []
    scope: str = ""
    client_uri: str = ""
    logo_uri: str = ""
    software_id: str = ""
    software_version: str = ""


class RegisteredClient(msgspec.Struct, kw_only=True):
    """The registered client: its id (and secret, for a confidential client: shown this once) and metadata."""

    client_id: str
    client_id_issued_at: int
    redirect_uris: list[str]
    token_endpoint_auth_method: str
    grant_types: list[str] = []
    response_types: list[str] = []
    client_name: str = ""
    client_secret: str = ""
    client_secret_expires_at: int = 0


class TokenForm(msgspec.Struct, kw_only=True):
    grant_type: str
    code: str = ""
    redirect_uri: str = ""
    code_verifier: str = ""
    refresh_token: str = ""
    client_id: str = ""
    client_secret: str = ""
    resource: str = ""
    scope: str = ""


class RevokeForm(msgspec.Struct, kw_only=True):
    token: str
    token_type_hint: str = ""
    client_id: str = ""
    client_secret: str = ""


class TokenAnswer(msgspec.Struct, kw_only=True):
    """RFC 6749 section 5.1: an opaque access token (`f7o_…`) and the refresh token that replaces it."""

    access_token: str
    token_type: str
    expires_in: int
    scope: str = ""
    refresh_token: str = ""


class ConsentChoice(msgspec.Struct, kw_only=True):
    """The agent id the connection will act as (default: the one proposed from the client's name)."""

    agent: str = ""


class ConsentView(msgspec.Struct, kw_only=True):
    """An authorization request waiting for a human: which client, acting as which agent, under which policies."""

    id: str
    state: str
    client: dict[str, Any]
    redirect_uri: str
    redirect_host: str
    agent: str
    proposed_agent: str
    scopes: list[str]
    resource: str
    policies: list[dict[str, str]]
    active_connections: int
    created_at: float
    expires_at: float


class ConsentDecision(msgspec.Struct, kw_only=True):
    """Where the browser goes next: the client's redirect URI with the code, or with `error=access_denied`."""

    id: str
    state: str
    agent: str
    redirect_to: str


class ConnectionView(msgspec.Struct, kw_only=True):
    """One connection (a consent and the tokens refreshed from it), never a token."""

    id: str
    client_id: str
    client_name: str
    agent_id: str
    granted_by: str
    state: str
    created_at: float
    expires_at: float | None = None
    refresh_expires_at: float | None = None
    last_used_at: float | None = None
    revoked_at: float | None = None
    revoked_by: str = ""


class ClientView(msgspec.Struct, kw_only=True):
    client_id: str
    client_name: str
    redirect_uris: list[str]
    redirect_hosts: list[str]
    token_endpoint_auth_method: str
    created_at: float


_creator = SchemaCreator(plugins=openapi_schema_plugins)

_OAUTH_WHY = {
    400: "An OAuth error: invalid_request, invalid_grant, invalid_target, invalid_redirect_uri, …",
    401: "invalid_client: the client is unknown (deleted: register again) or failed to authenticate",
    404: "OAuth is off (`oauth.enabled: false`)",
    429: "too_many_requests: this address registered `oauth.registrations_per_minute` clients in the last minute "
    "(Retry-After says when to try again)",
}


def oauth_errors(*codes: int) -> dict[int, ResponseSpec]:
    """The OAuth error body for each status in `codes`."""
    return {code: ResponseSpec(OAuthErrorBody, generate_examples=False, description=_OAUTH_WHY[code]) for code in codes}


def _inline(container: Any) -> Schema:
    made = _creator.for_field_definition(FieldDefinition.from_annotation(container))
    return _creator.schema_registry.from_reference(made).schema if isinstance(made, Reference) else made


def form_body(container: Any, description: str) -> type[Operation]:
    """An Operation class carrying a form-encoded request body (the token and revocation endpoints)."""
    body = RequestBody(
        content={FORM: OpenAPIMediaType(schema=_inline(container))}, required=True, description=description
    )
    return operation(body=body)


def query_parameters(*names: tuple[str, str]) -> type[Operation]:
    """An Operation class with query parameters the handler reads itself (name, description), and no 200."""
    params = tuple(
        Parameter(
            name=n, param_in=ParamType.QUERY, schema=Schema(type=OpenAPIType.STRING), description=d, required=False
        )
        for n, d in names
    )

    return operation(headers=params, drop=("200",))  # `headers` takes any Parameter
