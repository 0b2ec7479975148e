"""Resolving the caller at the edge: data-plane identity and the control-plane guard."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from flux7.shared.errors import Unauthorized
from flux7.shared.identity import Caller

__all__ = ["caller_of", "caller_or_admin", "control_plane", "mesh_of", "peer_of"]


def mesh_of(conn: ASGIConnection[Any, Any, Any, Any]) -> Any:
    return conn.app.state.mesh


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
