"""sup7's admin API, what the console's supervisor page calls (CONTRACT 3 and 4): status, config, recent
decisions, pause and resume. Served by granian inside sup7's own event loop; `admin.token`, when set, guards
every route except /health."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.exceptions import HTTPException

from flux7.shared.supervisor.config import AdminConfig
from flux7.shared.supervisor.loop import Supervisor

__all__ = ["AdminServer", "create_admin_app"]

log = logging.getLogger("flux7.sup7")


def create_admin_app(supervisor: Supervisor, token: str = "") -> Litestar:
    expected = f"Bearer {token}".encode()

    def _guard(request: Request[Any, Any, Any]) -> Response[Any] | None:
        if not token:
            return None
        given = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(given, expected):
            return None
        return Response({"error": "unauthorized"}, status_code=401)

    @get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True}

    @get("/status")
    async def status(request: Request[Any, Any, Any]) -> Any:
        return _guard(request) or supervisor.status()

    @get("/config")
    async def config(request: Request[Any, Any, Any]) -> Any:
        return _guard(request) or supervisor.config_summary()

    @get("/decisions")
    async def decisions(request: Request[Any, Any, Any]) -> Any:
        refused = _guard(request)
        if refused:
            return refused
        raw = request.query_params.get("limit", "50")
        try:
            limit = int(raw)
        except ValueError:
            return Response({"error": "limit must be an integer"}, status_code=400)
        return {"decisions": supervisor.recent_decisions(max(1, min(limit, 500)))}

    @post("/pause", status_code=200)
    async def pause(request: Request[Any, Any, Any]) -> Any:
        refused = _guard(request)
        if refused:
            return refused
        supervisor.pause()
        return supervisor.status()

    @post("/resume", status_code=200)
    async def resume(request: Request[Any, Any, Any]) -> Any:
        refused = _guard(request)
        if refused:
            return refused
        supervisor.resume()
        return supervisor.status()

    def _http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
        return Response({"error": str(exc.detail)}, status_code=exc.status_code)

    return Litestar(
        route_handlers=[health, status, config, decisions, pause, resume],
        exception_handlers={HTTPException: _http_error},
        openapi_config=None,
        debug=False,
    )


class AdminServer:
    """The admin app under granian's embedded server, in the caller's event loop."""

    def __init__(self, supervisor: Supervisor, config: AdminConfig) -> None:
        from granian.constants import Interfaces
        from granian.server.embed import Server

        self.config = config
        self._server = Server(
            create_admin_app(supervisor, config.token),
            address=config.host,
            port=config.port,
            interface=Interfaces.ASGI,
            log_enabled=False,
        )
        self._task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve())
        log.info("admin API on http://%s:%d", self.config.host, self.config.port)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.stop()
        try:
            await asyncio.wait_for(self._task, 5)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
        self._task = None
