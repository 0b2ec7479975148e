"""GET /metrics: Prometheus text (CONTRACT 1.12). Control plane."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from .auth import control_plane, mesh_of

__all__ = ["ROUTES"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@get("/metrics", guards=[control_plane], sync_to_thread=True)
def metrics(request: Request[Any, Any, Any]) -> Response[str]:
    text = mesh_of(request).metrics.render()
    return Response(text, media_type=CONTENT_TYPE)


ROUTES = [metrics]
