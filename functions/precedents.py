"""Precedents on the control plane: what memory holds per tool + agent, and forgetting it (CONTRACT 1.6)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath

from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, ok, responses
from flux7.functions.responses import json_response
from flux7.functions.schemas import ApprovalDecision, ForgetPrecedents
from flux7.shared.decisions.precedents import Precedents
from flux7.shared.errors import BadRequest
from flux7.shared.json_depth import decode

__all__ = ["ROUTES"]


def _precedents(request: Request[Any, Any, Any]) -> Precedents:
    return mesh_of(request).precedents


class _Forget(msgspec.Struct):
    tool: str = ""
    agent: str = ""


# Static segments win over `/approvals/{approval_id}` in Litestar's router (a test pins this down).
@get(
    "/approvals/precedents",
    guards=[control_plane],
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(ApprovalDecision, "The precedents table")}, 401, 501),
)
async def list_precedents(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(await _precedents(request).table())


@get(
    "/approvals/{approval_id:str}/precedents",
    guards=[control_plane],
    tags=["approvals"],
    security=ADMIN,
    responses=responses(
        {200: ok(dict[str, Any], "the couple's past decisions and what the precedent rule would do now")}, 400, 401, 404
    ),
)
async def approval_precedents(request: Request[Any, Any, Any], approval_id: FromPath[str]) -> Response[bytes]:
    """Beside one approval: the past decisions of its tool and agent, and what the precedent rule would do now."""
    mesh = mesh_of(request)
    precedents = _precedents(request)
    approval = await asyncio.to_thread(mesh.approvals.get, approval_id)
    history = await asyncio.to_thread(
        mesh.approvals.couple_history, approval.agent_id, approval.tool, exclude=approval.id
    )
    return json_response(await precedents.explain(approval, history))


@post(
    "/approvals/precedents/forget",
    guards=[control_plane],
    status_code=200,
    operation_class=json_body(ForgetPrecedents),
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(dict[str, Any], "`{tool, agent, result}`")}, *BODY, 401, 409, 501, 503),
)
async def forget_precedents(request: Request[Any, Any, Any]) -> Response[bytes]:
    try:
        body = decode(await request.body() or b"{}", type=_Forget)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise BadRequest("invalid JSON body") from None
    return json_response(await _precedents(request).forget(body.tool, body.agent, actor_of(request)))


ROUTES = [list_precedents, approval_precedents, forget_precedents]
