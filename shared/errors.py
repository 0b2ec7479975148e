"""Typed errors that carry their meaning; the edge (functions/errors.py) maps them to HTTP and JSON-RPC once."""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Flux7Error",
    "Forbidden",
    "NotFound",
    "NotImplementedFeature",
    "OutboundRefused",
    "PayloadTooLarge",
    "TooDeep",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
]


class Flux7Error(Exception):
    status_code = 500
    jsonrpc_code = -32603

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.message, **self.extra}


class BadRequest(Flux7Error):
    status_code = 400
    jsonrpc_code = -32602


class OutboundRefused(BadRequest):
    """A destination the outbound guard will not connect to (shared/outbound.py): not globally routable, or
    not an http(s) URL. A 400 when a caller supplies it."""


class Unauthorized(Flux7Error):
    status_code = 401
    jsonrpc_code = -32600


class Forbidden(Flux7Error):
    status_code = 403
    jsonrpc_code = -32600


class NotFound(Flux7Error):
    status_code = 404
    jsonrpc_code = -32602


class Conflict(Flux7Error):
    status_code = 409
    jsonrpc_code = -32600


class PayloadTooLarge(Flux7Error):
    status_code = 413
    jsonrpc_code = -32600


class TooDeep(BadRequest):
    """A JSON body nested deeper than the mesh accepts (shared/json_depth.py): a parse error, said why."""

    jsonrpc_code = -32700


class UnsupportedMediaType(Flux7Error):
    status_code = 415
    jsonrpc_code = -32600


class NotImplementedFeature(Flux7Error):
    status_code = 501
    jsonrpc_code = -32601


class Unavailable(Flux7Error):
    """The store cannot take the write a call needs (the SQLite file locked by another process past the busy
    timeout, a full disk): the call is refused, never run untraced (fail closed)."""

    status_code = 503
    jsonrpc_code = -32603


class ConfigError(Exception):
    """A configuration fault, named by file, key and what is wrong. Stops the start."""

    def __init__(self, file: str, key: str, fault: str) -> None:
        super().__init__(f"{file}: {key}: {fault}")
        self.file = file
        self.key = key
        self.fault = fault
