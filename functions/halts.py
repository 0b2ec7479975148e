"""The emergency stop over HTTP (CONTRACT 1.10): list, stop, resume. All control plane."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery, RawBody

from flux7.functions.approvals import json_object, text_field
from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, ok, responses
from flux7.functions.schemas import HaltCreated, HaltRequest, HaltResumed, HaltView

__all__ = ["ROUTES"]


@get(
    "/halts",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["halts"],
    security=ADMIN,
    response_description="Stops in force (all with `?status=all`)",
    responses=responses({}, 400, 401),
    operation_id="HaltsListHalts",
    summary="ListHalts",
)
def list_halts(request: Request[Any, Any, Any], status: FromQuery[str] = "active") -> list[HaltView]:
    """Stops in force, newest first; `?status=all` adds the resumed ones."""
    registry = mesh_of(request).halts
    halts = registry.all() if status == "all" else registry.active()
    return [h.view() for h in halts]


@post(
    "/halts",
    guards=[control_plane],
    operation_class=json_body(HaltRequest, required=True),
    sync_to_thread=True,
    tags=["halts"],
    security=ADMIN,
    responses=responses({201: ok(HaltCreated, "Stopped"), 200: ok(HaltCreated, "Already in force")}, *BODY, 401, 503),
)
def create_halt(request: Request[Any, Any, Any], body: RawBody) -> Response[HaltCreated]:
    fields = json_object(body)
    result = mesh_of(request).halts.create(
        text_field(fields, "scope", strip=True),
        text_field(fields, "target", strip=True),
        text_field(fields, "reason", strip=True),
        actor_of(request, text_field(fields, "by", strip=True)),
    )
    created = HaltCreated(
        halt=result.halt.view(), revoked_grants=result.revoked_grants, denied_approvals=result.denied_approvals
    )
    if result.already_active:
        created.already_active = True
        return Response(created, status_code=200)
    return Response(created, status_code=201)


@post(
    "/halts/{halt_id:str}/resume",
    guards=[control_plane],
    status_code=200,
    operation_class=json_body(HaltRequest),
    sync_to_thread=True,
    tags=["halts"],
    security=ADMIN,
    responses=responses({}, *BODY, 401, 404, 503),
)
def resume_halt(request: Request[Any, Any, Any], halt_id: FromPath[str], body: RawBody) -> HaltResumed:
    fields = json_object(body)
    result = mesh_of(request).halts.resume(halt_id, actor_of(request, text_field(fields, "by", strip=True)))
    return HaltResumed(halt=result.halt.view(), restored_grants=result.restored_grants)


ROUTES = [list_halts, create_halt, resume_halt]
