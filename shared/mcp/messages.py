"""JSON-RPC 2.0 / MCP wire vocabulary: message shapes, error codes, protocol revisions and their negotiation.

Two eras share one endpoint (docs/mcp.md):
- the handshake era (2024-11-05 … 2025-11-25): `initialize`, then requests inside a session;
- the stateless era (2026-07-28): no handshake, every request carries its protocol version and client
  capabilities in `params._meta`, and over HTTP mirrors them in `MCP-Protocol-Version` / `Mcp-Method` /
  `Mcp-Name` headers that must agree with the body (-32020 otherwise).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from flux7.shared.json_depth import MAX_JSON_DEPTH, too_deep

__all__ = [
    "CLIENT_CAPABILITIES_META_KEY",
    "CLIENT_INFO_META_KEY",
    "HANDSHAKE_VERSIONS",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_HANDSHAKE_VERSION",
    "METHOD_NOT_FOUND",
    "MODERN_VERSIONS",
    "PARSE_ERROR",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO",
    "SERVER_INFO_META_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "JsonRpcMessage",
    "McpError",
    "Message",
    "ModernEnvelope",
    "decode_header_value",
    "decode_message",
    "encode_header_value",
    "error_message",
    "http_status_for",
    "modern_envelope",
    "negotiate_handshake",
    "result_message",
]

# JSON-RPC and MCP error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

HANDSHAKE_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[-1]
# The reference answers initialize with 2024-11-05; a client that names no version gets that.
REFERENCE_VERSION = "2024-11-05"

PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"

SERVER_INFO: dict[str, str] = {"name": "flux7-mesh", "version": "0.1.0"}

# Methods whose named parameter is mirrored in the `Mcp-Name` header (stateless era).
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

# The stateless era maps error codes to HTTP statuses; anything else is 200.
_MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


class JsonRpcMessage(msgspec.Struct, kw_only=True):
    """One JSON-RPC 2.0 request, notification or answer, as the HTTP routes take and give it (an object; batches
    are not accepted): its envelope for the OpenAPI document. `Message` is what is decoded."""

    jsonrpc: str = "2.0"
    id: Any = None
    method: str = ""
    params: Any = None


class McpError(Exception):
    """A JSON-RPC error answer: the protocol failed, as opposed to a tool failing (an `isError` result)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def body(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class Message(msgspec.Struct, kw_only=True):
    """One decoded JSON-RPC message. `has_id` tells a request (id member present, even null) from a
    notification (no id member), as JSON-RPC 2.0 section 4.1 defines them."""

    method: str = ""
    params: Any = None
    id: Any = None
    has_id: bool = False
    is_response: bool = False

    @property
    def is_notification(self) -> bool:
        return bool(self.method) and not self.has_id

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.params.get("_meta") if isinstance(self.params, dict) else None
        return meta if isinstance(meta, dict) else {}


def decode_message(raw: bytes | str) -> Message:
    """Parse one JSON-RPC object. Raises McpError(-32700) for bad JSON, McpError(-32600) for anything that is
    not a single request, notification or response object (batches included)."""
    if too_deep(raw):
        raise McpError(PARSE_ERROR, f"Parse error: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise McpError(PARSE_ERROR, "Parse error") from None
    if not isinstance(body, dict):
        raise McpError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC object (batches are not supported)")
    rid = body.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        raise McpError(INVALID_REQUEST, "Invalid Request: id must be a string, a number or null")
    method = body.get("method")
    if method is None and ("result" in body or "error" in body):
        return Message(id=rid, has_id="id" in body, is_response=True)
    if not isinstance(method, str) or not method:
        raise McpError(INVALID_REQUEST, "Invalid Request: method must be a non-empty string")
    params = body.get("params")
    if params is not None and not isinstance(params, dict | list):
        raise McpError(INVALID_REQUEST, "Invalid Request: params must be an object")
    return Message(method=method, params=params, id=rid, has_id="id" in body)


def result_message(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def error_message(rid: Any, error: McpError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": error.body()}


def http_status_for(code: int, *, modern: bool) -> int:
    """The HTTP status of a JSON-RPC error answer: table-mapped in the stateless era, 200 in sessions
    (where the reference answers protocol errors inside a 200)."""
    return _MODERN_STATUS.get(code, 200) if modern else 200


def negotiate_handshake(requested: Any) -> str:
    """`initialize`: echo a handshake revision we speak; no version named gets the reference's 2024-11-05; an
    unknown one (or a stateless-only one) gets our newest handshake revision, per the lifecycle rules."""
    if requested is None or requested == "":
        return REFERENCE_VERSION
    if isinstance(requested, str) and requested in HANDSHAKE_VERSIONS:
        return requested
    return LATEST_HANDSHAKE_VERSION


class ModernEnvelope(msgspec.Struct, frozen=True):
    protocol_version: str
    client_capabilities: Any
    client_info: Any = None


_B64 = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")
_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")


def encode_header_value(value: str) -> str:
    """Header-safe form of a value: printable ASCII passes, anything else travels as `=?base64?…?=`."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def decode_header_value(value: str | None) -> str | None:
    if value is None:
        return None
    m = _B64.fullmatch(value)
    if m is None:
        return value
    try:
        decoded = base64.b64decode(m.group("payload"), validate=True)
        return decoded.decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def modern_envelope(msg: Message, headers: Mapping[str, str] | None) -> ModernEnvelope:
    """Validate a stateless-era request: the `_meta` envelope, then (over HTTP) that the routing headers agree
    with the body, then the revision. Raises McpError with the first failed rung's code."""
    meta = msg.params.get("_meta") if isinstance(msg.params, dict) else None
    if not isinstance(meta, dict):
        raise McpError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying the required {PROTOCOL_VERSION_META_KEY!r} and "
            f"{CLIENT_CAPABILITIES_META_KEY!r} envelope keys",
        )
    missing = [k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta]
    if missing:
        raise McpError(INVALID_PARAMS, f"params._meta is missing the required envelope key(s): {', '.join(missing)}")
    version = meta[PROTOCOL_VERSION_META_KEY]
    if headers is not None:
        if headers.get("mcp-protocol-version") != version:
            raise McpError(
                HEADER_MISMATCH,
                "mcp-protocol-version header does not match the request envelope's protocol version",
            )
        if headers.get("mcp-method") != msg.method:
            raise McpError(HEADER_MISMATCH, "mcp-method header does not match the request body's method")
        key = NAME_BEARING.get(msg.method)
        if key is not None:
            body_value = msg.params.get(key)
            if body_value is not None and decode_header_value(headers.get("mcp-name")) != body_value:
                raise McpError(HEADER_MISMATCH, f"mcp-name header does not match the request body's {key!r} parameter")
    if not isinstance(version, str):
        raise McpError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    return ModernEnvelope(
        protocol_version=version,
        client_capabilities=meta[CLIENT_CAPABILITIES_META_KEY],
        client_info=meta.get(CLIENT_INFO_META_KEY),
    )


def unsupported_version(requested: str) -> McpError:
    return McpError(
        UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        {"supported": list(MODERN_VERSIONS), "requested": requested},
    )
