"""Per-agent tokens over HTTP: issue, list, revoke. All control plane; the token itself is answered once, on
issue, and never again."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.params import FromPath, FromQuery, RawBody

from flux7.functions.approvals import json_object, text_field
from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, responses
from flux7.functions.schemas import TokenRequest, TokenView
from flux7.shared.auth.tokens import AgentToken, parse_expiry
from flux7.shared.errors import BadRequest

__all__ = ["ROUTES"]


def _str(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return value.strip()


def _audit(request: Request[Any, Any, Any], event: str, record: AgentToken) -> None:
    """Issuing and revoking credentials are control-plane events in the trace (never the token itself)."""
    params = {"agent": record.agent_id, "id": record.id, "note": record.note}
    mesh_of(request).events.record(tool=event, actor=actor_of(request), params=params, policy_rule=event[5:])


@get(
    "/tokens",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["tokens"],
    security=ADMIN,
    response_description="Token records (never the secret)",
    responses=responses({}, 400, 401),
    operation_id="TokensListTokens",
    summary="ListTokens",
)
def list_tokens(request: Request[Any, Any, Any], agent: FromQuery[str] = "") -> list[TokenView]:
    return [t.view() for t in mesh_of(request).tokens.list(agent_id=agent)]


@post(
    "/tokens",
    guards=[control_plane],
    operation_class=json_body(TokenRequest, required=True),
    sync_to_thread=True,
    tags=["tokens"],
    security=ADMIN,
    status_code=201,
    response_description="Issued: the only answer that carries `token`",
    responses=responses({}, *BODY, 401, 503),
)
def issue_token(request: Request[Any, Any, Any], body: RawBody) -> TokenView:
    fields = json_object(body)
    agent = text_field(fields, "agent", strip=True) or text_field(fields, "agent_id", strip=True)
    if not agent:
        raise BadRequest("agent is required")
    mesh = mesh_of(request)
    issued = mesh.tokens.issue(
        agent,
        note=text_field(fields, "note", strip=True),
        expires_at=parse_expiry(text_field(fields, "expires", strip=True)),
    )
    _audit(request, "mesh.token_issue", issued.record)
    return issued.record.view(issued.token)


@delete(
    "/tokens/{ref:str}",
    guards=[control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["tokens"],
    security=ADMIN,
    response_description="Revoked",
    responses=responses({}, 400, 401, 404, 503),
)
def revoke_token(request: Request[Any, Any, Any], ref: FromPath[str]) -> TokenView:
    record = mesh_of(request).tokens.revoke(ref)
    _audit(request, "mesh.token_revoke", record)
    return record.view()


ROUTES = [list_tokens, issue_token, revoke_token]
