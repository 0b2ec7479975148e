"""`mesh7 --mcp`: the mesh as an MCP stdio server (CONTRACT 1.1, 1.14).

Newline-delimited JSON-RPC on stdin/stdout; every log line goes to stderr. Two modes:
- standalone: this process builds the mesh, answers on stdio, and serves the HTTP API on the config port in the
  same event loop (granian's embedded server), so approvals can be resolved while the agent waits;
- relay: when a daemon already answers `GET /health` on that port for the same config, each line is relayed to
  its `POST /mcp` (through the mesh client, shared/mesh_client.py) and the daemon governs. A daemon serving
  another config is refused, never relayed to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
import threading
from typing import Any, BinaryIO, NoReturn

import msgspec

from flux7.shared.auth.identity import Caller
from flux7.shared.cli.kit import WebApps
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.gate.tty_prompt import terminal_channel
from flux7.shared.mcp.messages import (
    INTERNAL_ERROR,
    NAME_BEARING,
    PROTOCOL_VERSION_META_KEY,
    McpError,
    Message,
    decode_message,
    encode_header_value,
    error_message,
    modern_envelope,
    result_message,
)
from flux7.shared.mcp.server import McpServer, RequestContext
from flux7.shared.mesh_client import AsyncMeshClient, MeshClient, MeshError
from flux7.shared.settings import Settings, config_id, load_settings

__all__ = ["LineChannel", "StdioServer", "main", "probe_daemon", "relay"]

log = logging.getLogger("flux7.mcp.stdio")

MAX_LINE = 8 * 1024 * 1024
RELAY_TIMEOUT = 300.0  # CONTRACT 1.1: the relay's client timeout is 5 minutes
PARSE_ERROR_LINE = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'

_STDERR_LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"generic": {"()": "logging.Formatter", "fmt": "[%(levelname)s] %(name)s: %(message)s"}},
    "handlers": {"stderr": {"formatter": "generic", "class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
    "loggers": {
        "_granian": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        "granian.access": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
    },
}


def _decode_error_line(e: McpError) -> bytes:
    """CONTRACT 1.14's exact parse-error line; a parse error with a reason (too deep) or another fault keeps it."""
    if e.code == -32700 and e.message == "Parse error":
        return PARSE_ERROR_LINE
    return msgspec.json.encode(error_message(None, e))


class LineChannel:
    """stdin lines into the event loop (a reader thread: pipes, files and TTYs alike), lines out to stdout."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._read, name="mcp-stdin", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                line = self._stdin.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # an overlong line is refused whole
                        line = self._stdin.readline(MAX_LINE + 1)
                    line = b"\x00"
                self._loop.call_soon_threadsafe(self._queue.put_nowait, line)
        except (OSError, ValueError) as e:
            log.warning("stdin closed: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    async def lines(self) -> Any:
        while (line := await self._queue.get()) is not None:
            line = line.strip()
            if line:
                yield line

    def write(self, payload: bytes) -> None:
        self._stdout.write(payload.strip() + b"\n")
        self._stdout.flush()


def _modern_headers(msg: Message) -> dict[str, str]:
    """A stateless-era request carries its revision in `_meta`; over HTTP the headers must mirror it."""
    version = msg.meta.get(PROTOCOL_VERSION_META_KEY)
    if not isinstance(version, str):
        return {}
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": msg.method}
    key = NAME_BEARING.get(msg.method)
    name = msg.params.get(key) if key and isinstance(msg.params, dict) else None
    if isinstance(name, str):
        headers["Mcp-Name"] = encode_header_value(name)
    return headers


class StdioServer:
    """One stdio session: the agent is fixed (`--mcp-agent`), the session id is `--mcp-session-id` or minted."""

    def __init__(
        self,
        server: McpServer,
        agent: str,
        session_id: str = "",
        ready: asyncio.Future[Any] | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.server = server
        # `--mcp-agent` is a claim; an agent token (MESH_AGENT_TOKEN) proves the identity instead.
        self.caller = caller or Caller(agent_id=agent or "claude", authenticated=True)
        self.session_id = session_id or secrets.token_hex(16)
        # the person at the terminal, asked when approval.channel says so (stdin and stdout carry JSON-RPC)
        self.terminal = terminal_channel(server.mesh.settings.approval.channel)
        self.protocol_version = ""  # negotiated by initialize (handshake era), for the OpenTelemetry spans
        self._ready = ready  # the mesh's start (upstream connections): tools wait for it, the handshake does not
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, channel: LineChannel) -> None:
        async for line in channel.lines():
            try:
                msg = decode_message(line)
            except McpError as e:
                channel.write(_decode_error_line(e))
                continue
            if msg.is_notification or msg.is_response:
                continue
            # Each request runs on its own, so a call blocked on an approval never holds up a ping.
            task = asyncio.create_task(self._answer(msg, channel))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _answer(self, msg: Message, channel: LineChannel) -> None:
        modern = PROTOCOL_VERSION_META_KEY in msg.meta
        version = str(msg.meta.get(PROTOCOL_VERSION_META_KEY) or "") if modern else self.protocol_version
        ctx = RequestContext(
            caller=self.caller,
            session_id=self.session_id,
            modern=modern,
            transport="stdio",
            terminal=self.terminal,
            mcp_session_id=self.session_id,
            protocol_version=version,
        )
        try:
            if modern:
                modern_envelope(msg, None)
            if self._ready is not None and msg.method.startswith("tools/"):
                await asyncio.shield(self._ready)
            result = await self.server.handle(msg, ctx)
            if msg.method == "initialize" and isinstance(result, dict):
                self.protocol_version = str(result.get("protocolVersion") or "")
            reply = result_message(msg.id, result if result is not None else {})
        except McpError as e:
            reply = error_message(msg.id, e)
        except Flux7Error as e:  # a typed refusal (the trace store unavailable: 503 on HTTP) keeps its message
            reply = error_message(msg.id, McpError(e.jsonrpc_code, e.message))
        except Exception:
            log.exception("MCP %s failed", msg.method)
            reply = error_message(msg.id, McpError(INTERNAL_ERROR, "Internal error"))
        channel.write(msgspec.json.encode(reply))


# -- relay ------------------------------------------------------------------------------------------------------


def probe_daemon(port: int, timeout: float = 1.0) -> dict[str, Any] | None:
    """The daemon's /health body when one answers 200 on this port, else None."""
    try:
        with MeshClient(f"http://localhost:{port}", timeout=timeout) as mesh:
            reply = mesh.send("GET", "/health")
    except MeshError:
        return None
    if reply.status != 200:
        return None
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def relay(base_url: str, bearer: str, channel: LineChannel, session_hint: str = "") -> int:
    """Relay stdin lines to `POST <base>/mcp`, keep the Mcp-Session-Id initialize returns, DELETE it at EOF."""
    state: dict[str, str] = {}
    tasks: set[asyncio.Task[None]] = set()
    # the session hint (X-Session-Id) names the session in traces of stateless-era calls
    async with AsyncMeshClient(base_url, token=bearer, session_id=session_hint, timeout=RELAY_TIMEOUT) as mesh:

        async def forward(line: bytes, msg: Message) -> None:
            h = {"Mcp-Session-Id": state["session"]} if state.get("session") else {}
            h.update(_modern_headers(msg))
            try:
                reply = await mesh.post_mcp(line, headers=h)
            except MeshError as e:
                log.warning("relay to %s failed: %s", base_url, e.__cause__)
                if msg.has_id:
                    err = McpError(INTERNAL_ERROR, f"relay to {base_url} failed: {e.__cause__}")
                    channel.write(msgspec.json.encode(error_message(msg.id, err)))
                return
            if msg.method == "initialize" and reply.headers.get("mcp-session-id"):
                state["session"] = reply.headers["mcp-session-id"]
            body = reply.content.strip()
            if not msg.has_id or reply.status == 202:
                return
            if body.startswith(b"{"):
                channel.write(body)
            else:
                err = McpError(INTERNAL_ERROR, f"relay: the daemon answered HTTP {reply.status}")
                channel.write(msgspec.json.encode(error_message(msg.id, err)))

        async for line in channel.lines():
            try:
                msg = decode_message(line)
            except McpError as e:
                channel.write(_decode_error_line(e))
                continue
            if msg.method == "initialize" or not msg.has_id:
                await forward(line, msg)  # in order: the session id must be known before what follows
                continue
            task = asyncio.create_task(forward(line, msg))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if state.get("session"):
            try:
                await mesh.end_mcp_session(state["session"])
            except MeshError as e:
                log.warning("could not end the relayed session: %s", e.__cause__)
    return 0


# -- standalone -------------------------------------------------------------------------------------------------


def _http_server(app: Any, settings: Settings, port: int) -> Any:
    """The HTTP API in this event loop (granian embedded), so it shares the mesh, and its upstream
    connections, with stdio."""
    from granian.constants import Interfaces
    from granian.log import LogLevels
    from granian.server.embed import Server

    tls = settings.tls
    return Server(
        app,
        address=settings.host,
        port=port,
        interface=Interfaces.ASGINL,  # the mesh is started and stopped by this module, not by a lifespan
        log_dictconfig=_STDERR_LOGGING,
        log_level=LogLevels.warning,
        log_access=False,
        ssl_cert=settings.resolve_path(tls.cert_file) if tls.cert_file else None,
        ssl_key=settings.resolve_path(tls.key_file) if tls.key_file else None,
    )


def _report_http_end(task: asyncio.Task[Any], port: int) -> None:
    if not task.cancelled() and task.exception() is not None:  # the port was taken: stdio goes on without it
        log.warning("the HTTP API on port %s is not available: %s", port, task.exception())


async def _standalone(
    apps: WebApps, settings: Settings, port: int, agent: str, session_id: str, token: str = ""
) -> int:
    from flux7.shared.errors import Unauthorized
    from flux7.shared.mesh import Mesh

    # The HTTP edge is composed here, at the entry point, as `serve` does with its factory string.
    create_app = apps.mesh_app  # the composition root's (functions/entry.py): the core never imports the edge
    mesh = Mesh(settings)
    caller: Caller | None = None
    if token:
        try:
            caller = mesh.identity.require(mesh.identity.caller(f"Bearer {token}"))
        except Unauthorized as e:
            print(f"mesh7 --mcp: MESH_AGENT_TOKEN refused: {e.message}", file=sys.stderr)
            await mesh.stop()
            return 2
    # The handshake is answered at once; upstreams connect meanwhile (tools/* wait for them, up to the
    # registry's start timeout), so an agent never times out waiting for `initialize`.
    started = asyncio.ensure_future(mesh.start())
    server = _http_server(create_app(mesh), settings, port)

    async def serve_http() -> None:
        await asyncio.shield(started)
        await server.serve()

    http = asyncio.create_task(serve_http())
    http.add_done_callback(lambda t: _report_http_end(t, port))
    try:
        channel = LineChannel(sys.stdin.buffer, sys.stdout.buffer)
        await StdioServer(mesh.mcp, agent, session_id, ready=started, caller=caller).run(channel)
    finally:
        if not started.done():  # stdin ended before the upstreams connected
            started.cancel()
        await asyncio.gather(started, return_exceptions=True)
        if not http.done():
            server.stop()
        try:
            await asyncio.wait_for(http, 5)
        except TimeoutError:
            http.cancel()
        except Exception:  # already reported when it ended
            pass
        await mesh.stop()
    return 0


def main(apps: WebApps, config: str | None, port: int | None, agent: str = "claude", session_id: str = "") -> int:
    """The `mesh7 --mcp` entry point; returns the exit status, except after a standalone session, which ends the
    process itself (`_leave`)."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(levelname)s] %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per relayed message is noise
    try:
        settings = load_settings(config)
    except ConfigError as e:
        print(f"mesh7 --mcp: config error: {e}", file=sys.stderr)
        return 2
    port = port or settings.port
    health = probe_daemon(port)
    if health is not None:
        ours, theirs = config_id(settings), health.get("config")
        if theirs != ours:
            print(
                f"mesh7 --mcp: a mesh daemon on port {port} serves another config (its id {theirs!r}, ours "
                f"{ours!r} for {settings.config_path or 'the built-in defaults'}); refusing to relay to it. "
                "Stop that daemon, or pass --port to run this one elsewhere.",
                file=sys.stderr,
            )
            return 2
        bearer = os.environ.get("MESH_AGENT_TOKEN") or f"agent:{agent}"
        log.info("a mesh daemon answers on port %s for this config: relaying stdio to it", port)

        async def _relay() -> int:
            channel = LineChannel(sys.stdin.buffer, sys.stdout.buffer)
            return await relay(f"http://localhost:{port}", bearer, channel, session_id)

        return asyncio.run(_relay())
    from flux7.shared.cli.serve import check_bind, check_cli_binaries

    try:
        check_bind(settings, settings.host)
        check_cli_binaries(settings)
    except ConfigError as e:
        print(f"mesh7 --mcp: config error: {e}", file=sys.stderr)
        return 2
    token = os.environ.get("MESH_AGENT_TOKEN", "")
    _leave(asyncio.run(_standalone(apps, settings, port, agent, session_id, token)))


def _leave(code: int) -> NoReturn:
    """Exit at once, without finalizing the interpreter. granian's embedded server may still have a Rust thread
    winding down; one that takes the GIL while the interpreter finalizes is ended with pthread_exit, which Rust
    turns into an abort (exit -6, "panic in a function that cannot unwind"), seen in CI after a clean session.
    Nothing is left to finalize: `_standalone` stopped the mesh (upstreams, traces, database) before returning."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
