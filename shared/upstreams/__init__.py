"""Upstream tool sources (OpenAPI, MCP, CLI) behind one interface: registry.Registry, docs/upstreams.md."""

from .base import CallContext, Classification, Param, Timings, ToolDef, UpstreamResult
from .registry import Registry

__all__ = ["CallContext", "Classification", "Param", "Registry", "Timings", "ToolDef", "UpstreamResult"]
