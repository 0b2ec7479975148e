"""Resolving the caller at the edge: data-plane identity and the control-plane guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from flux7.shared.auth.identity import Caller, Principal
from flux7.shared.errors import Unauthorized

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = [
    "actor_of",
    "caller_of",
    "caller_or_admin",
    "control_plane",
    "mesh_of",
    "peer_of",
    "principal_of",
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
    (the console lists the catalog with the admin token, which is no agent identity off loopback)."""
    try:
        return caller_of(conn)
    except Unauthorized:
        if mesh_of(conn).identity.is_admin(conn.headers.get("authorization"), peer_of(conn)):
            return None
        raise


def control_plane(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for control-plane routes (CONTRACT 1.5, DESIGN decision 6)."""
    if not mesh_of(conn).identity.is_admin(conn.headers.get("authorization"), peer_of(conn)):
        raise Unauthorized("control plane requires admin authorization")


def principal_of(conn: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """The control-plane principal the request's credential proves; 401 when it proves none."""
    principal = mesh_of(conn).identity.principal(conn.headers.get("authorization"), peer_of(conn))
    if principal is None:
        raise Unauthorized("control plane requires admin authorization")
    return principal


def resolvers(conn: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Litestar guard for the approval queue's routes: the control plane, or a supervisor proven by its own
    agent token or JWT."""
    principal_of(conn)


def actor_of(conn: ASGIConnection[Any, Any, Any, Any], claimed: str = "") -> str:
    """The actor a control-plane change is recorded under: its credential's name (`owner:admin-token`,
    `supervisor:<id>`), never a socket address nor what the body says (`claimed` counts only in the
    open-loopback trust mode, which has no credential)."""
    return principal_of(conn).resolution(claimed)[0]
