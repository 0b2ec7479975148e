"""`sup7 -c sup7.yaml start|status [-v]` (also `flux7 supervisor …`; `-c` and `-v` go before or after the command).

The only place sup7 reads the environment: MESH_AGENT_TOKEN (sup7's own agent token, preferred), MESH_ADMIN_TOKEN
(the mesh's control-plane token, used without an agent token; without either, a loopback mesh's generated token
file, see shared/auth/admin_token.py), MEM7_TOKEN
(when memory.token is empty), ANTHROPIC_API_KEY and OPENAI_API_KEY (when a provider has no api_key)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Mapping
from typing import Any

import click
import msgspec

from flux7.shared.cli.kit import CONTEXT, Fail, LazyGroup, run, runtime
from flux7.shared.errors import ConfigError
from flux7.shared.supervisor.config import Sup7Config, load_config

__all__ = ["main", "supervisor"]

_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def with_environment(config: Sup7Config, env: Mapping[str, str]) -> Sup7Config:
    replace = msgspec.structs.replace
    mesh = config.mesh
    if env.get("MESH_AGENT_TOKEN"):
        mesh = replace(mesh, token=env["MESH_AGENT_TOKEN"])
    if env.get("MESH_ADMIN_TOKEN"):
        mesh = replace(mesh, admin_token=env["MESH_ADMIN_TOKEN"])
    if not mesh.token and not mesh.admin_token:  # a local mesh's generated token (shared/auth/admin_token.py)
        from flux7.shared.auth.admin_token import cli_admin_token

        mesh = replace(mesh, admin_token=cli_admin_token(mesh.url, env))
    memory = config.memory
    if not memory.token and env.get("MEM7_TOKEN"):
        memory = replace(memory, token=env["MEM7_TOKEN"])
    ev = config.evaluator
    if not ev.api_key and env.get(_KEY_ENV.get(ev.provider, "")):
        ev = replace(ev, api_key=env[_KEY_ENV[ev.provider]])
    chain = tuple(
        replace(p, api_key=env[_KEY_ENV[p.provider]]) if not p.api_key and env.get(_KEY_ENV.get(p.provider, "")) else p
        for p in ev.chain
    )
    return replace(config, mesh=mesh, memory=memory, evaluator=replace(ev, chain=chain))


async def _start(config: Sup7Config) -> int:
    from flux7.shared.supervisor.admin import AdminServer
    from flux7.shared.supervisor.loop import Supervisor

    supervisor = Supervisor(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, supervisor.stopping.set)
    admin = AdminServer(supervisor, config.admin) if config.admin.enabled else None
    if admin is not None:
        admin.start()
    endpoint = None
    if config.mcp_server.enabled:
        from flux7.shared.supervisor.mcp_server import McpEndpoint

        endpoint = McpEndpoint(supervisor.desk, config.mcp_server)
        # Over stdio sup7 is the client's child: when the client closes stdin, sup7 stops; so it does when the
        # HTTP server cannot listen (a claude-code sup7 without it would only escalate, late).
        endpoint.start(stop_event=supervisor.stopping)
        if not any(p.provider == "claude-code" for p in config.evaluator.providers()):
            logging.getLogger("flux7.sup7").warning(
                "mcp_server is enabled but no evaluator is claude-code: sup7_pending will stay empty"
            )
    logging.getLogger("flux7.sup7").info(
        "sup7 starting: mesh=%s agent=%s interval=%.2fs providers=%s rules=%d",
        config.mesh.url,
        config.mesh.agent_id,
        config.poll.interval,
        " > ".join(p["provider"] for p in supervisor.llm.describe()) or "none",
        len(config.rules),
    )
    try:
        await supervisor.run()
    finally:
        if endpoint is not None:
            await endpoint.stop()
        if admin is not None:
            await admin.stop()
        await supervisor.aclose()
    if endpoint is not None and endpoint.failed:
        print(f"sup7: {endpoint.failed}", file=sys.stderr)
        return 1
    return 0


async def _status(config: Sup7Config, verbose: bool) -> int:
    from flux7.shared.supervisor.mesh_api import MeshApi, MeshUnavailable

    mesh = MeshApi(
        config.mesh.url, config.mesh.agent_id, token=config.mesh.token, admin_token=config.mesh.admin_token, timeout=5
    )
    try:
        healthy = await mesh.is_healthy()
        report: dict[str, object] = {"mesh": {"url": config.mesh.url, "reachable": healthy}}
        if healthy:
            try:
                report["pending"] = len(await mesh.pending(None))
            except MeshUnavailable as e:
                report["pending_error"] = str(e)
    finally:
        await mesh.aclose()
    report["memory"] = {"enabled": config.memory.enabled, "url": config.memory.url}
    report["evaluator"] = [p.provider for p in config.evaluator.providers()] or ["none"]
    m = config.mcp_server
    report["mcp_server"] = (
        {"enabled": True, "transport": m.transport}
        | ({"url": f"http://{m.host}:{m.port}/mcp"} if m.transport == "http" else {})
        if m.enabled
        else {"enabled": False}
    )
    report["rules"] = [r.name for r in config.rules]
    if verbose:
        report["config"] = {
            "path": config.config_path,
            "poll_interval_s": config.poll.interval,
            "tool_scopes": list(config.poll.tool_scopes),
            "project_dirs": list(config.project_dirs),
            "decision_log": config.decision_log,
            "rules": [msgspec.to_builtins(r) for r in config.rules],
        }
    print(json.dumps(report, indent=2))
    return 0 if healthy else 1


def _options(f: Any) -> Any:
    f = click.option("-v", "--verbose", is_flag=True, default=False, help="debug logs / the full status")(f)
    return click.option("-c", "--config", default=None, metavar="FILE", help="sup7.yaml (default: ./sup7.yaml)")(f)


def _load(config: str | None, verbose: bool) -> tuple[Sup7Config, bool]:
    """The options given on the command or before it (`sup7 -c x start` and `sup7 start -c x` both work)."""
    ctx = click.get_current_context()
    parent = ctx.parent.params if ctx.parent is not None else {}
    path = config or parent.get("config") or "sup7.yaml"
    verbose = verbose or bool(parent.get("verbose"))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=runtime().err,
    )
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        return with_environment(load_config(path), runtime().env), verbose
    except ConfigError as e:
        hint = " (pass -c FILE; examples/sup7.yaml is a start)" if e.key == "(file)" else ""
        raise Fail(f"config error: {e}{hint}", 2) from None


@click.group("supervisor", cls=LazyGroup, context_settings=CONTEXT)
@_options
def supervisor(config: str | None, verbose: bool) -> None:
    """sup7, the level-1 approval reviewer: rules, then an LLM (or a Claude Code session), approve or deny the
    mesh's pending approvals and escalate the rest to a human."""


@supervisor.command("start", context_settings=CONTEXT)
@_options
def start(config: str | None, verbose: bool) -> int:
    """Review the mesh's pending approvals until stopped.

    Polls the mesh; stops on Ctrl-C or SIGTERM."""
    loaded, _ = _load(config, verbose)
    return asyncio.run(_start(loaded))


@supervisor.command("status", context_settings=CONTEXT)
@_options
def status(config: str | None, verbose: bool) -> int:
    """Print the mesh's state and this configuration as JSON.

    Exit 1 when the mesh cannot be reached."""
    loaded, verbose = _load(config, verbose)
    return asyncio.run(_status(loaded, verbose))


def main(argv: list[str] | None = None) -> int:
    return run(supervisor, argv, prog="sup7")


if __name__ == "__main__":
    sys.exit(main())
