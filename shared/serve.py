"""Running the service under granian: validate settings first, then hand the ASGI factory to the workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from .errors import ConfigError
from .identity import accepted_identities, is_loopback_bind
from .settings import Settings, load_settings

__all__ = ["check_bind", "serve"]


def check_bind(settings: Settings, host: str) -> None:
    """DESIGN decision 6: off loopback the control plane needs an admin token, so refuse to start without one."""
    if not is_loopback_bind(host) and not settings.auth.admin_token:
        raise ConfigError(
            settings.config_path or "(defaults)",
            "auth.admin_token",
            f"binding to {host} (not loopback) requires an admin token (auth.admin_token or MESH_ADMIN_TOKEN)",
        )


def serve(
    config: str | None,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    factory: str = "functions.asgi:app_factory",
    openapi_url: str = "",
    openapi_backend: str = "",
) -> int:
    try:
        settings = load_settings(config)
        bind = host or settings.host
        check_bind(settings, bind)
    except ConfigError as e:
        print(f"flux7: config error: {e}", file=sys.stderr)
        return 2
    from granian import Granian
    from granian.constants import Interfaces

    if config:
        os.environ["FLUX7_CONFIG"] = str(Path(config).resolve())
    # The workers judge identities by the address actually bound (a --host override included).
    os.environ["FLUX7_HOST"] = bind
    settings = msgspec.structs.replace(settings, host=bind)
    scheme = "https" if settings.tls.cert_file else "http"
    print(f"flux7: serving on {scheme}://{bind}:{port or settings.port}; {accepted_identities(settings)}", flush=True)
    if openapi_url:  # handed to the workers, which build their settings themselves
        os.environ["FLUX7_OPENAPI_URL"] = openapi_url
        os.environ["FLUX7_OPENAPI_BACKEND"] = openapi_backend
    n = workers or settings.workers
    tls = settings.tls
    server = Granian(
        factory.split(":")[0] + ":" + factory.split(":")[1],
        address=bind,
        port=port or settings.port,
        interface=Interfaces.ASGI,
        workers=max(1, n),
        factory=True,
        log_access=False,
        ssl_cert=settings.resolve_path(tls.cert_file) if tls.cert_file else None,
        ssl_key=settings.resolve_path(tls.key_file) if tls.key_file else None,
        ssl_protocol_min="tls1.2",  # type: ignore[arg-type]
        backlog=2048,
    )
    server.serve()
    return 0
