"""mem7's JSON-RPC 2.0 dispatcher (CONTRACT 2.1, 2.2): one request in, one answer out, for /rpc, /mcp,
SSE and stdio alike. Tool failures are results with isError; only protocol faults are JSON-RPC errors."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.json_depth import MAX_JSON_DEPTH, too_deep
from flux7.shared.memory.service import IDENTITY_META

if TYPE_CHECKING:
    from flux7.shared.memory.service import MemoryService as _Service

__all__ = ["PROTOCOL_VERSIONS", "RpcAnswer", "dispatch", "error_answer"]

log = logging.getLogger("flux7.memory")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


class RpcAnswer(msgspec.Struct):
    body: dict[str, Any]
    has_id: bool
    parsed: bool = True  # a parsed request without an id is a notification (/mcp answers 202, no body)


class _Fault(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_answer(code: int, message: str, *, request_id: Any = None, has_id: bool = False) -> RpcAnswer:
    body: dict[str, Any] = {"jsonrpc": "2.0"}
    if has_id:
        body["id"] = request_id
    body["error"] = {"code": code, "message": message}
    return RpcAnswer(body=body, has_id=has_id, parsed=code != -32700)


def _text_result(text: str, is_error: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return result


def _tools_call(
    service: _Service, params: Any, has_params: bool, authenticated: bool, identity: str | None = None
) -> dict[str, Any]:
    if not has_params:
        return _text_result("missing params", True)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return _text_result("invalid params: params must be an object", True)
    name, arguments, meta = params.get("name", ""), params.get("arguments"), params.get("_meta")
    if not isinstance(name, str):
        return _text_result("invalid params: name must be a string", True)
    if arguments is not None and not isinstance(arguments, dict):
        return _text_result("invalid params: arguments must be an object", True)
    meta = meta if isinstance(meta, dict) else None
    if identity is not None:  # an agent token or JWT named the caller: no _meta may say otherwise
        meta = {**(meta or {}), IDENTITY_META: identity}
        authenticated = True
    text, is_error = service.call_tool(name, arguments or {}, authenticated=authenticated, meta=meta)
    return _text_result(text, is_error)


def _call(
    service: _Service, method: str, params: Any, has_params: bool, authenticated: bool, identity: str | None
) -> Any:
    if method == "initialize":
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mem7", "version": service.config.version},
        }
    if method == "tools/list":
        return {"tools": service.tools}
    if method == "tools/call":
        return _tools_call(service, params, has_params, authenticated, identity)
    if method == "memory/snapshot_reminder":
        return service.snapshot_reminder()
    if method == "memory/chain":
        return service.chain()
    raise _Fault(-32601, f"method not found: {method}")


def dispatch(service: _Service, body: bytes, *, authenticated: bool, identity: str | None = None) -> RpcAnswer:
    """One JSON-RPC request. `identity`: the agent a verified credential (agent token, JWT) names, which then
    decides whose memories a call touches whatever the request's `_meta` says."""
    if too_deep(body):
        return error_answer(-32700, f"parse error: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        request = msgspec.json.decode(body)
    except msgspec.DecodeError as e:
        return error_answer(-32700, f"parse error: {e}")
    if not isinstance(request, dict):
        return error_answer(-32700, f"parse error: not a JSON object: {type(request).__name__}")
    has_id = "id" in request
    request_id = request.get("id")
    method = request.get("method", "")
    if not isinstance(method, str) or not isinstance(request.get("jsonrpc", ""), str):
        return error_answer(-32700, "parse error: jsonrpc and method must be strings")
    if request.get("jsonrpc") != "2.0":
        message = "invalid request: jsonrpc must be 2.0"
        return error_answer(-32600, message, request_id=request_id, has_id=has_id)
    try:
        result = _call(service, method, request.get("params"), "params" in request, authenticated, identity)
    except _Fault as f:
        return error_answer(f.code, f.message, request_id=request_id, has_id=has_id)
    except Exception:
        log.exception("memory JSON-RPC %s failed", method)
        return error_answer(-32603, "internal error", request_id=request_id, has_id=has_id)
    answer: dict[str, Any] = {"jsonrpc": "2.0"}
    if has_id:
        answer["id"] = request_id
    answer["result"] = result
    return RpcAnswer(body=answer, has_id=has_id)
