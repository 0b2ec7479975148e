"""Upstream tool sources (OpenAPI, MCP, CLI) behind one interface: registry.Registry, docs/upstreams.md."""

from flux7.shared.upstreams.base import CallContext, Classification, Param, Timings, ToolDef, UpstreamResult
from flux7.shared.upstreams.registry import Registry

__all__ = ["CallContext", "Classification", "Param", "Registry", "Timings", "ToolDef", "UpstreamResult"]
