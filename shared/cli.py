"""The `flux7` and `mesh7` commands. The entry point is the only place that reads argv and the environment."""

from __future__ import annotations

import argparse
import sys

from . import __version__

__all__ = ["main", "mesh7_main"]


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, help="config.yaml (default: built-in defaults)")
    p.add_argument("--host", default=None, help="bind address (default: config host, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: config port, 9090)")
    p.add_argument("--workers", type=int, default=None, help="granian worker processes")


def _trace_verify(argv: list[str]) -> int:
    from .tracing.verify_cli import main as verify_main

    return verify_main(argv)


_DELEGATED = {
    # subcommands that parse their own arguments (their leading --options must reach them untouched)
    "doctor": "shared.doctor",
    "backup": "shared.backup",
    "restore": "shared.restore",
    "supervisor": "shared.supervisor.cli",
    "agent": "shared.agent.cli",
    "token": "shared.token_cli",
    "governance": "shared.governance_cli",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in _DELEGATED:
        import importlib

        return int(importlib.import_module(_DELEGATED[argv[0]]).main(argv[1:]) or 0)
    if argv[:2] == ["trace", "verify"]:
        return _trace_verify(argv[2:])
    parser = argparse.ArgumentParser(
        prog="flux7",
        description="Govern agents' tool calls and remember them.",
        epilog="Also: flux7 agent, flux7 trace verify FILE..., flux7 supervisor -c sup7.yaml start|status, "
        "flux7 doctor, flux7 backup, flux7 restore, flux7 token …, flux7 governance … (each has --help).",
    )
    parser.add_argument("--version", action="version", version=f"flux7 {__version__}")
    sub = parser.add_subparsers(dest="command")
    _serve_args(sub.add_parser("serve", help="run every role in one service"))
    args = parser.parse_args(argv)
    if args.command == "serve":
        from .serve import serve

        return serve(args.config, host=args.host, port=args.port, workers=args.workers)
    parser.print_help()
    return 2


def mesh7_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        print(f"mesh7 {__version__}")
        return 0
    if argv[:2] == ["trace", "verify"]:
        return _trace_verify(argv[2:])
    if argv[:1] == ["discover"]:
        from .discover import main as discover_main

        return discover_main(argv[1:])
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    parser = argparse.ArgumentParser(prog="mesh7", description="flux7 mesh daemon and MCP stdio server")
    _serve_args(parser)
    parser.add_argument("--mcp", action="store_true", help="run the MCP stdio server")
    parser.add_argument("--mcp-agent", default="claude")
    parser.add_argument("--mcp-session-id", default="")
    parser.add_argument("--openapi", default=None, help="an OpenAPI spec URL to govern")
    parser.add_argument("--backend", default=None, help="the backend URL for --openapi")
    args = parser.parse_args(argv)
    if args.mcp:
        from .mcp.stdio import main as stdio_main

        return stdio_main(config=args.config, port=args.port, agent=args.mcp_agent, session_id=args.mcp_session_id)
    if bool(args.openapi) != bool(args.backend):
        parser.error("--openapi and --backend go together")
    from .serve import serve

    return serve(
        args.config,
        host=args.host,
        port=args.port,
        workers=args.workers,
        openapi_url=args.openapi or "",
        openapi_backend=args.backend or "",
    )


if __name__ == "__main__":
    raise SystemExit(main())
