"""Running the service under granian: validate settings first, then hand the app factory to the workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec

from flux7.shared.auth.admin_token import effective_admin_token, token_file
from flux7.shared.auth.identity import accepted_identities, is_loopback_bind
from flux7.shared.cli.kit import WebApps
from flux7.shared.errors import ConfigError, Unavailable
from flux7.shared.ports import PortUnavailable, check_listen
from flux7.shared.settings import Settings, load_settings

__all__ = ["check_bind", "check_cli_binaries", "serve", "startup_line"]


def check_bind(settings: Settings, host: str) -> None:
    """docs/security.md: off loopback the control plane needs an admin token, so refuse to start without one."""
    if not is_loopback_bind(host) and not settings.auth.admin_token:
        raise ConfigError(
            settings.config_path or "(defaults)",
            "auth.admin_token",
            f"binding to {host} (not loopback) requires an admin token (auth.admin_token or MESH_ADMIN_TOKEN)",
        )


def check_cli_binaries(settings: Settings) -> None:
    """Fail closed at start on a `cli_tools` entry whose binary is not there: a tool the mesh would offer and
    then fail on every call is a configuration mistake, found now rather than by an agent later."""
    from flux7.shared.upstreams.cli import missing_binary

    for i, tool in enumerate(settings.cli_tools):
        why = missing_binary(tool, settings)
        if why:
            raise ConfigError(
                settings.config_path or "(defaults)",
                f"cli_tools[{i}].bin",
                f"{why}; install it, give its full path, or remove the {tool.name!r} entry",
            )


def startup_line(settings: Settings, host: str, port: int) -> str:
    """What the operator reads first: where the console is and how the control plane is guarded. A generated
    token rides in the console link's fragment (never sent to the server, never in access logs); a configured
    one is a secret kept elsewhere and is not printed."""
    scheme = "https" if settings.tls.cert_file else "http"
    every = host in ("0.0.0.0", "::", "")
    shown = "127.0.0.1" if every else host
    url = f"{scheme}://[{shown}]:{port}" if ":" in shown else f"{scheme}://{shown}:{port}"
    # the link is for this machine; say that every interface listens too
    url_note = f" on every interface ({host or '0.0.0.0'})" if every else ""
    if settings.auth.admin_token:
        return f"flux7: serving {url}{url_note} (console: {url}/console/; control plane: the configured admin token)"
    if settings.auth.open_loopback:
        return (
            f"flux7: serving {url}{url_note} (console: {url}/console/; control plane OPEN to loopback: "
            "auth.open_loopback)"
        )
    token = effective_admin_token(settings)
    return (
        f"flux7: serving {url}{url_note}; console: {url}/console/#token={token} "
        f"(admin token in {token_file(settings)}; mesh, flux7 governance and sup7 read it when they find this "
        "config: --config, FLUX7_CONFIG or ./config.yaml, else the built-in defaults)"
    )


def serve(
    config: str | None,
    apps: WebApps,
    *,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    factory: str = "",
    openapi_url: str = "",
    openapi_backend: str = "",
    access_log: bool | None = None,
    found: str = "",
) -> int:
    """`config`: the file the command tree chose (shared/settings.py choose_config); `found`: how it was found
    when the user did not name it, said first."""
    if found:
        print(f"flux7: config: {found}", file=sys.stderr, flush=True)
    try:
        storage = os.environ.get("FLUX7_STORAGE_PATH") or None
        settings = load_settings(config, storage_path=storage)  # as the workers (functions/asgi.py) will
        bind = host or settings.host
        port = settings.port if port is None else port
        check_listen(bind, port)  # before anything is written (the admin token, the database)
        check_bind(settings, bind)
        check_cli_binaries(settings)
        # made here, once, before the workers start; they read the same file
        line = startup_line(settings, bind, port or settings.port)
    except ConfigError as e:
        print(f"flux7: config error: {e}", file=sys.stderr)
        return 2
    except PortUnavailable as e:
        print(f"flux7: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"flux7: cannot create the admin token file: {e}", file=sys.stderr)
        return 2
    if settings.database:
        from flux7.shared.store.db import database_for

        try:  # PostgreSQL: reached and migrated once here, so a wrong URL is one clear line, not N worker crashes
            database_for(settings).close()
        except Unavailable as e:
            print(f"flux7: {e}", file=sys.stderr)
            return 2
    from granian import Granian
    from granian.constants import Interfaces, Loops

    if config:
        os.environ["FLUX7_CONFIG"] = str(Path(config).resolve())
    # The workers judge identities by the address actually bound (a --host override included).
    os.environ["FLUX7_HOST"] = bind
    settings = msgspec.structs.replace(settings, host=bind)
    line = f"{line}; {accepted_identities(settings)}"  # one line says where, how it is guarded, and whom it believes
    if openapi_url:  # handed to the workers, which build their settings themselves
        os.environ["FLUX7_OPENAPI_URL"] = openapi_url
        os.environ["FLUX7_OPENAPI_BACKEND"] = openapi_backend
    n = workers or settings.workers
    tls = settings.tls
    server = Granian(
        factory or apps.mesh_factory,
        address=bind,
        port=port or settings.port,
        # RSGI: the fast paths answered in one await and one call, the rest bridged to the ASGI app (docs/benchmarks.md,
        # functions/rsgi.py). No route speaks WebSocket.
        interface=Interfaces.RSGI,
        websockets=False,
        # asyncio's own loop, whatever else is installed: granian's default picks rloop or uvloop when present,
        # whose transports the upstream client does not take (every forwarded call failed) and whose ready
        # queue the group commit cannot read (its lone writes would wait a turn); uvloop measured no faster
        # here (docs/benchmarks.md).
        loop=Loops.asyncio,
        workers=max(1, n),
        factory=True,
        log_access=settings.access_log if access_log is None else access_log,
        ssl_cert=settings.resolve_path(tls.cert_file) if tls.cert_file else None,
        ssl_key=settings.resolve_path(tls.key_file) if tls.key_file else None,
        ssl_protocol_min="tls1.2",  # type: ignore[arg-type]
        backlog=2048,
        workers_kill_timeout=settings.stop_timeout_seconds,  # see STOP_TIMEOUT_SECONDS (shared/settings.py)
    )
    print(line, file=sys.stderr, flush=True)
    server.serve()
    return 0
