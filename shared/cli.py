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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["doctor"], ["backup"], ["restore"]):  # REMAINDER would refuse their leading --options
        import importlib

        return int(importlib.import_module(f".{argv[0]}", __package__).main(argv[1:]) or 0)
    if argv[:1] == ["supervisor"]:  # likewise: sup7's `-c sup7.yaml` comes first
        from .supervisor.cli import main as sup_main

        return int(sup_main(argv[1:]) or 0)
    parser = argparse.ArgumentParser(prog="flux7", description="Govern agents' tool calls and remember them.")
    parser.add_argument("--version", action="version", version=f"flux7 {__version__}")
    sub = parser.add_subparsers(dest="command")
    _serve_args(sub.add_parser("serve", help="run every role in one service"))
    trace = sub.add_parser("trace", help="trace utilities")
    trace.add_argument("action", choices=["verify"])
    trace.add_argument("rest", nargs=argparse.REMAINDER)
    for name in ("supervisor", "agent", "doctor", "backup", "restore"):
        p = sub.add_parser(name, help=f"{name} (see docs)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "serve":
        from .serve import serve

        return serve(args.config, host=args.host, port=args.port, workers=args.workers)
    if args.command == "trace":
        return _trace_verify(args.rest)
    if args.command == "supervisor":
        from .supervisor.cli import main as sup_main

        return int(sup_main(args.rest) or 0)
    if args.command in ("agent", "doctor", "backup", "restore"):
        import importlib

        module = importlib.import_module(f".{args.command}", __package__)
        return int(module.main(args.rest) or 0)
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
