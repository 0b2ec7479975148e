"""Policies on the control plane: GET /policies, per-tool edits, and the policy files themselves."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, put
from litestar.openapi.spec import OpenAPIType, Schema
from litestar.params import FromPath

from flux7.functions.auth import control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, ok, responses
from flux7.functions.responses import json_response
from flux7.functions.schemas import PolicyEdit, PolicyFileText
from flux7.shared.errors import BadRequest
from flux7.shared.gate.policy_edit import PolicyFiles
from flux7.shared.json_depth import decode

__all__ = ["ROUTES"]


def _files(request: Request[Any, Any, Any]) -> PolicyFiles:
    return PolicyFiles(mesh_of(request).policies)


def _trace_edit(request: Request[Any, Any, Any], params: dict[str, Any], by: str) -> None:
    client = request.scope.get("client")
    who = by or f"http:{client[0] if client else ''}"
    mesh_of(request).events.record(tool="mesh.policy_edit", actor=who, params=params, policy_rule="policy_edit")


@get(
    "/policies",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    responses=responses({200: ok(list[dict[str, Any]], "Policies by specificity")}, 401),
)
async def list_policies(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(mesh_of(request).policies.current.to_wire())


class _ToolEdit(msgspec.Struct):
    action: str = ""
    by: str = ""


@put(
    "/policies/{agent:str}/tools/{tool:str}",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    operation_class=json_body(PolicyEdit, required=True),
    responses=responses({200: ok(dict[str, Any], "The edit's outcome")}, *BODY, 401, 404, 409, 501, 503),
)
async def edit_tool_action(
    request: Request[Any, Any, Any], agent: FromPath[str], tool: FromPath[str]
) -> Response[bytes]:
    try:
        body = decode(await request.body() or b"{}", type=_ToolEdit)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise BadRequest("invalid JSON body") from None
    result = _files(request).set_tool_action(agent, tool, body.action)
    if result.get("changed"):
        _trace_edit(request, {"agent": agent, "tool": tool, "action": body.action}, body.by)
    return json_response(result)


@get(
    "/policy-files",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    responses=responses({200: ok(Any, "The policy files")}, 401, 501),
)
async def list_policy_files(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(_files(request).list())


@get(
    "/policy-files/{name:str}",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    responses=responses({200: ok(dict[str, Any], "The file and its text")}, 400, 401, 404, 501),
)
async def read_policy_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    return json_response(_files(request).read(name))


@put(
    "/policy-files/{name:str}",
    guards=[control_plane],
    tags=["policies"],
    security=ADMIN,
    operation_class=json_body(
        PolicyFileText,
        required=True,
        description='The policy file\'s YAML as sent, or `{"text": ...}` as JSON',
        other={"application/yaml": Schema(type=OpenAPIType.STRING), "text/plain": Schema(type=OpenAPIType.STRING)},
    ),
    responses=responses({200: ok(dict[str, Any], "The file as written")}, *BODY, 401, 404, 409, 501, 503),
)
async def write_policy_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    raw = await request.body()
    # The file's bytes as sent (or `{"text": ...}` as JSON); decoding and every limit are the loader's.
    data: str | bytes = raw
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = decode(raw)
        except msgspec.DecodeError:
            raise BadRequest("invalid JSON body") from None
        if not isinstance(body, dict) or not isinstance(body.get("text", ""), str):
            raise BadRequest('a JSON body is {"text": "<the policy file>"}')
        data = body.get("text", "")
    result = _files(request).write(name, data)
    _trace_edit(request, {"file": name}, request.headers.get("x-flux7-by", ""))
    return json_response(result)


ROUTES = [list_policies, edit_tool_action, list_policy_files, read_policy_file, write_policy_file]
