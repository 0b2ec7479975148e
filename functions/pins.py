"""Pins: GET /tools/pins, POST /tools/pins/accept (501 while `pin_tools` is off)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get, post

from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, responses
from flux7.functions.schemas import AcceptedPins, AcceptPins, PinView
from flux7.shared.errors import BadRequest, NotImplementedFeature
from flux7.shared.json_depth import decode

__all__ = ["ROUTES"]


def _pins(request: Request[Any, Any, Any]) -> Any:
    pins = mesh_of(request).pins
    if not pins.enabled:
        raise NotImplementedFeature("tool pinning is off (pin_tools: false)")
    return pins


@get(
    "/tools/pins",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    response_description="Every upstream MCP tool's pin, the ones waiting for an accept first",
    responses=responses({}, 401, 501),
)
async def list_pins(request: Request[Any, Any, Any]) -> list[PinView]:
    pins = _pins(request)
    views: list[PinView] = pins.view(mesh_of(request).registry.tools())
    return views


class _Accept(msgspec.Struct):
    tools: list[str] = msgspec.field(default_factory=list)
    server: str = ""
    by: str = ""


@post(
    "/tools/pins/accept",
    guards=[control_plane],
    status_code=200,
    operation_class=json_body(AcceptPins),
    tags=["policies"],
    security=ADMIN,
    responses=responses({}, *BODY, 401, 501, 503),
)
async def accept_pins(request: Request[Any, Any, Any]) -> AcceptedPins:
    pins = _pins(request)
    raw = await request.body()
    try:
        body = decode(raw or b"{}", type=_Accept)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadRequest(f"invalid JSON body: {e}") from None
    by = actor_of(request, body.by)
    accepted = pins.accept(mesh_of(request).registry.tools(), names=body.tools, server=body.server, by=by)
    return AcceptedPins(accepted=accepted, by=by)


ROUTES = [list_pins, accept_pins]
