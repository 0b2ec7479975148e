"""Resolving the caller at the edge: data-plane identity and the control-plane guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from flux7.shared.auth.identity import Caller, Principal
from flux7.shared.auth.users import SESSION_COOKIE
from flux7.shared.errors import Forbidden, Unauthorized

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = [
    "actor_of",
    "caller_of",
    "caller_or_admin",
    "control_plane",
    "grantors",
    "mesh_of",
    "owners",
    "peer_of",
    "principal_of",
    "readers",
    "resolvers",
]


def mesh_of(conn: ASGIConnection[Any, Any, Any, Any]) -> Mesh:
    mesh: Mesh = conn.app.state.mesh
    return mesh


def peer_of(conn: ASGIConnection[Any, Any, Any, Any]) -> str:
    client = conn.scope.get("client")
    return str(client[0]) if client else ""


def caller_of(conn: ASGIConnection[Any, Any, Any, Any], *, require: bool = True) -> Caller:
    identity = mesh_of(conn).identity
    caller = identity.caller(conn.headers.get("authorization"))
    return identity.require(caller) if require else caller


def caller_or_admin(conn: ASGIConnection[Any, Any, Any, Any]) -> Caller | None:
    """The data-plane caller, or None for a request the data plane refuses but that holds control-plane rights
    (the console lists the catalog with the admin token or a user's credential, which name no agent)."""
    try:
        return caller_of(conn)
    except Unauthorized:
        principal = _principal(conn)
        if principal is not None and principal.reads:
            return None
        raise


_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def control_plane(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for control-plane routes: reading takes a viewer (any user, the admin token), changing
    anything an admin or owner (docs/security.md "Users and roles"). 401 without a credential, 403 with one
    that may not."""
    principal = principal_of(conn)
    if conn.scope.get("method", "GET") in _READS:
        if not principal.reads:
            raise Forbidden(f"{principal.actor} may not read the control plane")
    elif not principal.writes:
        raise Forbidden(f"{principal.actor} ({principal.role}) may not change the control plane: an admin's task")


def owners(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for user management: owners only (the admin token, a user with the owner role)."""
    principal = principal_of(conn)
    if not principal.manages_users:
        raise Forbidden(f"{principal.actor} ({principal.role}) may not manage users: an owner's task")


def _principal(conn: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
    session = conn.cookies.get(SESSION_COOKIE, "")
    return mesh_of(conn).identity.principal(conn.headers.get("authorization"), peer_of(conn), session)


def principal_of(conn: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """The control-plane principal the request's credential proves; 401 when it proves none."""
    principal = _principal(conn)
    if principal is None:
        raise Unauthorized("control plane requires admin authorization")
    return principal


def grantors(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for creating a grant: admins and owners, and approvers (within their scope, checked by the
    route); not supervisors over REST (their grants are the MCP grant.create tool's, capped at a day)."""
    principal = principal_of(conn)
    if principal.role not in ("owner", "admin", "approver"):
        raise Forbidden(f"{principal.actor} ({principal.role}) may not create grants")


def readers(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for what every principal may read, supervisors included: the approval queue."""
    principal_of(conn)


def resolvers(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for the approval queue's routes: the control plane's owners and admins, approvers (each
    decision is then checked against their scope), and supervisors proven by their own agent token or JWT."""
    principal = principal_of(conn)
    if principal.role == "viewer":
        raise Forbidden(f"{principal.actor} is a viewer: viewers read, approvers decide")


def actor_of(conn: ASGIConnection[Any, Any, Any, Any], claimed: str = "") -> str:
    """The actor a control-plane change is recorded under: its credential's name (`owner:admin-token`,
    `supervisor:<id>`), never a socket address nor what the body says (`claimed` counts only in the
    open-loopback trust mode, which has no credential)."""
    return principal_of(conn).resolution(claimed)[0]
