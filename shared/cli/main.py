"""The `flux7` command tree, and `mesh7`, the mesh's drop-in name for its part of it (serve, mcp, trace, discover).

The entry points are the only places that read argv and the environment (shared/cli/kit.py runs them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from flux7.shared import __version__
from flux7.shared.cli.kit import CONTEXT, LazyGroup, UsageFail, WebApps, delegate, run, runtime, web_apps
from flux7.shared.settings import choose_config

__all__ = ["flux7", "main", "mesh7", "mesh7_main"]

_ROOT_LAZY = {
    "trace": ("flux7.shared.tracing.verify_cli:trace", "Check the hash chain of trace files (trace verify)."),
    "discover": ("flux7.shared.cli.discover:discover", "Connect to the configured upstreams and draft a policy."),
    "approvals": (
        "flux7.shared.cli.approvals:approvals",
        "Review and resolve approvals; emergency stop (alias: mesh).",
    ),
    "memory": ("flux7.shared.memory.cli:memory", "The memory role: daemon, MCP stdio, verify, rescan (alias: mem7)."),
    "supervisor": ("flux7.shared.supervisor.cli:supervisor", "sup7, the level-1 approval reviewer (alias: sup7)."),
    "token": ("flux7.shared.cli.tokens:token", "Per-agent tokens, and the machine's admin and memory tokens."),
    "user": (
        "flux7.shared.cli.users:user",
        "Named humans: users, roles, personal tokens (add, list, disable, rotate).",
    ),
    "agent": ("flux7.shared.cli.main:agent", "A terminal agent whose every tool call goes through the mesh."),
    "governance": (
        "flux7.shared.cli.governance:governance",
        "Agent catalog, scores, verdicts, dependency graph, diffs, replay.",
    ),
    "doctor": ("flux7.shared.cli.doctor:doctor", "Check a deployment and say what to fix."),
    "backup": ("flux7.shared.cli.backup:backup", "Push the database to its Litestream replica now."),
    "restore": ("flux7.shared.cli.backup:restore", "Restore the database from its Litestream replica."),
    "db": ("flux7.shared.cli.main:db", "The store itself: copy a SQLite deployment into PostgreSQL (db migrate-to)."),
}

agent = delegate(
    "flux7.shared.agent.cli:main",
    "A terminal agent whose every tool call goes through the mesh (flux7 agent --help).",
    "agent",
)


def _inherit(ctx: click.Context, name: str, value: Any) -> Any:
    """A subcommand's option, else the same option given before it (`mesh7 --config c.yaml serve`)."""
    if value not in (None, False) or ctx.parent is None:
        return value
    return ctx.parent.params.get(name, value)


def _serve_options(f: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--config",
                "-c",
                default=None,
                metavar="FILE",
                help="config.yaml (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults)",
            ),
            click.option("--host", default=None, help="bind address (default: the config's host, 127.0.0.1)"),
            click.option("--port", type=int, default=None, help="port (default: the config's port, 9090)"),
            click.option("--workers", type=click.IntRange(min=1), default=None, help="granian worker processes"),
            click.option(
                "--openapi", default=None, metavar="URL", help="an OpenAPI spec URL to govern (with --backend)"
            ),
            click.option("--backend", default=None, metavar="URL", help="the backend URL for --openapi"),
        ]
    ):
        f = option(f)
    return f


def _serve(
    config: str | None,
    host: str | None,
    port: int | None,
    workers: int | None,
    openapi: str | None,
    backend: str | None,
    access_log: bool | None,
) -> int:
    if bool(openapi) != bool(backend):
        raise UsageFail("--openapi and --backend go together")
    from flux7.shared.cli.serve import serve

    choice = choose_config(config, runtime().env)
    return serve(
        choice.path,
        web_apps(),
        found="" if choice.chosen else choice.why(),
        host=host,
        port=port,
        workers=workers,
        openapi_url=openapi or "",
        openapi_backend=backend or "",
        access_log=access_log,
    )


@click.command("serve", context_settings=CONTEXT)
@_serve_options
@click.option(
    "--access-log/--no-access-log",
    default=None,
    help="one line per request on stdout (default: the config's access_log, on)",
)
@click.pass_context
def serve_command(ctx: click.Context, /, **o: Any) -> int:
    """Run every role (mesh, memory, console) in one service."""
    o = {k: _inherit(ctx, k, v) for k, v in o.items()}
    return _serve(**o)


def _mcp_config(option: str | None, prog: str) -> str | None:
    """The config the MCP stdio server runs (the rule every command follows), said on stderr when found: an MCP
    client shows its server's stderr, and the built-in defaults govern no tools."""
    rt = runtime()
    choice = choose_config(option, rt.env)
    if choice.source == "defaults":
        print(f"{prog}: config: {choice.why()}; no tools are configured: pass --config FILE", file=rt.err)
    elif not choice.chosen:
        print(f"{prog}: config: {choice.why()}", file=rt.err)
    return choice.path


@click.command("mcp", context_settings=CONTEXT)
@click.option(
    "--config",
    "-c",
    default=None,
    metavar="FILE",
    help="config.yaml (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults)",
)
@click.option("--port", type=int, default=None, help="the mesh daemon's port to relay to or serve on (default 9090)")
@click.option(
    "--agent", "--mcp-agent", "agent", default=None, help="the agent id the calls are made as (default claude)"
)
@click.option("--session-id", "--mcp-session-id", "session_id", default=None, help="a fixed MCP session id")
@click.pass_context
def mcp_command(
    ctx: click.Context, config: str | None, port: int | None, agent: str | None, session_id: str | None
) -> int:
    """The MCP stdio server that MCP clients launch.

    It relays to a mesh daemon of the same config when one answers on the port, else runs the mesh in process
    (and serves the HTTP API beside it, so approvals can be resolved)."""
    from flux7.shared.mcp.stdio import main as stdio_main

    return stdio_main(
        web_apps(),
        config=_mcp_config(_inherit(ctx, "config", config), "flux7 mcp"),
        port=_inherit(ctx, "port", port),
        agent=agent or _inherit(ctx, "mcp_agent", None) or "claude",
        session_id=session_id or _inherit(ctx, "mcp_session_id", None) or "",
    )


@click.group(
    "db",
    cls=LazyGroup,
    lazy={
        "migrate-to": (
            "flux7.shared.cli.db_migrate:migrate_to",
            "Copy a SQLite deployment into an empty PostgreSQL database, then verify it.",
        )
    },
    context_settings=CONTEXT,
)
def db() -> None:
    """The store itself: move a deployment from its SQLite file to PostgreSQL (docs/deploy.md#postgresql)."""


_F = TypeVar("_F", bound=Callable[..., Any])


def _version() -> Callable[[_F], _F]:
    # One option per group: click's version_option keeps the program name it first printed in its closure, so a
    # shared one would answer `flux7 --version` with "mesh7" once mesh7 had been asked in the same process.
    return click.version_option(__version__, "--version", message="%(prog)s %(version)s")


@click.group(
    "flux7",
    cls=LazyGroup,
    lazy=_ROOT_LAZY,
    context_settings=CONTEXT,
    epilog="The drop-in names run part of this tree under their own name: mesh7 (serve, mcp, trace, discover), "
    "mem7 (memory), sup7 (supervisor), mesh (approvals). Every command has --help.",
)
@_version()
def flux7() -> None:
    """Govern what AI agents do with their tools, and remember what happened."""


flux7.add_command(serve_command)
flux7.add_command(mcp_command)


@click.group(
    "mesh7",
    cls=LazyGroup,
    lazy={k: _ROOT_LAZY[k] for k in ("trace", "discover")},
    invoke_without_command=True,
    context_settings=CONTEXT,
    epilog="Without a command: serve (or, with --mcp, the MCP stdio server). Also `flux7 serve|mcp|trace|discover`.",
)
@_serve_options
@click.option("--mcp", is_flag=True, help="run the MCP stdio server (as `mesh7 mcp`)")
@click.option("--mcp-agent", default=None, help="with --mcp: the agent id (default claude)")
@click.option("--mcp-session-id", default=None, help="with --mcp: a fixed MCP session id")
@_version()
@click.pass_context
def mesh7(ctx: click.Context, /, mcp: bool, mcp_agent: str | None, mcp_session_id: str | None, **o: Any) -> int:
    """flux7's mesh: the daemon, the MCP stdio server, trace verification, policy discovery."""
    if ctx.invoked_subcommand is not None:
        return 0
    if mcp:
        unused = [f"--{k}" for k in ("host", "workers", "openapi", "backend") if o[k] is not None]
        if unused:
            raise UsageFail(f"--mcp does not take {', '.join(unused)}")
        from flux7.shared.mcp.stdio import main as stdio_main

        return stdio_main(
            web_apps(),
            config=_mcp_config(o["config"], "mesh7 --mcp"),
            port=o["port"],
            agent=mcp_agent or "claude",
            session_id=mcp_session_id or "",
        )
    return _serve(**o, access_log=None)


mesh7.add_command(serve_command)
mesh7.add_command(mcp_command)


def main(argv: list[str] | None = None, apps: WebApps | None = None) -> int:
    return run(flux7, argv, prog="flux7", apps=apps)


def mesh7_main(argv: list[str] | None = None, apps: WebApps | None = None) -> int:
    return run(mesh7, argv, prog="mesh7", apps=apps)


if __name__ == "__main__":
    raise SystemExit(main())
