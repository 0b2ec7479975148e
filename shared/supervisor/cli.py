"""`sup7 -c sup7.yaml start|status [-v]` (also `flux7 supervisor …`).

The only place sup7 reads the environment: MESH_ADMIN_TOKEN (the mesh's control-plane token; without it and
mesh.admin_token, a loopback mesh's generated token file, see shared/admin_token.py), MEM7_TOKEN
(when memory.token is empty), ANTHROPIC_API_KEY and OPENAI_API_KEY (when a provider has no api_key)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping

import msgspec

from ..errors import ConfigError
from .config import Sup7Config, load_config

__all__ = ["main"]

_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def with_environment(config: Sup7Config, env: Mapping[str, str]) -> Sup7Config:
    replace = msgspec.structs.replace
    mesh = config.mesh
    if env.get("MESH_ADMIN_TOKEN"):
        mesh = replace(mesh, admin_token=env["MESH_ADMIN_TOKEN"])
    if not mesh.admin_token:  # a local mesh's generated token, from its file (shared/admin_token.py)
        from ..admin_token import cli_admin_token

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
    from .admin import AdminServer
    from .loop import Supervisor

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
        from .mcp_server import McpEndpoint

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
    from .mesh_api import MeshApi, MeshUnavailable

    mesh = MeshApi(config.mesh.url, config.mesh.agent_id, admin_token=config.mesh.admin_token, timeout=5)
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="sup7", description="flux7 supervisor: level-1 approval reviewer")
    parser.add_argument("-c", "--config", default="sup7.yaml", help="sup7.yaml (default: ./sup7.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs / full status")
    parser.add_argument("command", choices=["start", "status"])
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        config = with_environment(load_config(args.config), os.environ)
    except ConfigError as e:
        print(f"sup7: config error: {e}", file=sys.stderr)
        return 2
    if args.command == "status":
        return asyncio.run(_status(config, args.verbose))
    return asyncio.run(_start(config))


if __name__ == "__main__":
    sys.exit(main())
