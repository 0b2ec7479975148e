"""GET /metrics: Prometheus text (CONTRACT 1.12) by prometheus_client's exposition. Control plane."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from flux7.functions.auth import control_plane, mesh_of
from flux7.functions.openapi import ADMIN, errors, ok
from flux7.shared.metrics import CONTENT_TYPE

__all__ = ["ROUTES"]


@get(
    "/metrics",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["meta"],
    security=ADMIN,
    responses={200: ok(str, "Prometheus text exposition", CONTENT_TYPE), **errors(401)},
)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    text = mesh_of(request).metrics.render().encode()
    # The header as given: a text/* media_type would get a second `charset` appended by Litestar.
    return Response(text, headers={"Content-Type": CONTENT_TYPE}, media_type=None)


ROUTES = [metrics]
