"""The three ways to reach an upstream MCP server: stdio (a child process speaking line JSON), SSE (a GET
event stream plus POSTs to the endpoint it names) and Streamable HTTP (a POST per message, answered by JSON or
by an event stream). Each delivers decoded messages to the session and reports its end once.

Streamable HTTP runs on mcp_http's keep-alive pool: any number of POSTs in flight, each answer parsed as it
arrives. SSE keeps httpx for its long-lived GET stream and its POSTs (answered 202, the answers arrive on the
stream)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import msgspec

from flux7.shared.mcp.messages import MODERN_VERSIONS, NAME_BEARING, PROTOCOL_VERSION_META_KEY, encode_header_value
from flux7.shared.upstreams.mcp_http import HttpError, HttpPool, HttpResponse, HttpTimeout, SseParser, valid_headers
from flux7.shared.upstreams.mcp_session import ConnectTimedOut, OnClose, OnMessage, TransportError

__all__ = ["SseTransport", "StdioTransport", "StreamableHttpTransport", "same_origin"]

log = logging.getLogger("flux7.upstreams.mcp")

_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; tool lists can be large


def _noop_message(_: Any) -> None:
    return None


def _noop_close(_: str) -> None:
    return None


def _decode(data: bytes | str, origin: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        text = data if isinstance(data, str) else data.decode("utf-8", "replace")
        log.warning("mcp %s: ignored a line that is not JSON: %.200s", origin, text)
        return None


def _json_or_none(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None


def same_origin(a: str, b: str) -> bool:
    ua, ub = urlsplit(a), urlsplit(b)
    default = {"http": 80, "https": 443}
    return (
        ua.scheme == ub.scheme
        and ua.hostname == ub.hostname
        and (ua.port or default.get(ua.scheme)) == (ub.port or default.get(ub.scheme))
    )


class StdioTransport:
    answers_inline = False
    stateless_capable = False

    def __init__(self, name: str, command: str, args: tuple[str, ...], env: Mapping[str, str], cwd: str | None) -> None:
        self.name = name
        self.command = command
        self.args = args
        self.env = dict(env)
        self.cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self._tasks: list[asyncio.Task[None]] = []
        self._on_message: OnMessage = _noop_message
        self._on_close: OnClose = _noop_close

    async def open(self, on_message: OnMessage, on_close: OnClose) -> None:
        self._on_message, self._on_close = on_message, on_close
        try:
            self.proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                limit=_LINE_LIMIT,
                start_new_session=True,  # its own process group: stop() also ends what it spawned (npx)
            )
        except OSError as e:
            raise TransportError(f"start {self.command}: {e.strerror or e}") from None
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_stdout()), loop.create_task(self._read_stderr())]

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self._stderr_tail.append(text)
            log.debug("mcp %s stderr: %s", self.name, text)

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        reason = "stdout closed"
        try:
            while line := await self.proc.stdout.readline():
                if line.strip():
                    msg = _decode(line, self.name)
                    if msg is not None:
                        self._on_message(msg)
            code = await self.proc.wait()
            # Let the stderr reader drain so the reason can quote the child's last words.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._tasks[1]), 1.0)
            tail = " | ".join(list(self._stderr_tail)[-3:])
            reason = f"process exited with code {code}" + (f": {tail}" if tail else "")
        except (ValueError, OSError) as e:  # ValueError: a line over the limit
            reason = f"read error: {e}"
        finally:
            self._on_close(reason)

    def negotiated(self, version: str) -> None:
        return None

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise TransportError("the server process is not running")
        try:
            proc.stdin.write(msgspec.json.encode(message) + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError, RuntimeError) as e:
            raise TransportError(f"write to the server process: {e}") from None

    async def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, sig)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), wait)
                        break
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class SseTransport:
    answers_inline = False
    stateless_capable = False

    def __init__(
        self,
        name: str,
        url: str,
        headers: Mapping[str, str],
        http: httpx.AsyncClient,
        post_timeout: float,
        connect_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.http = http
        self.post_timeout = post_timeout
        self.connect_timeout = connect_timeout
        self.endpoint = ""
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[str] | None = None
        self._on_message: OnMessage = _noop_message
        self._on_close: OnClose = _noop_close

    async def open(self, on_message: OnMessage, on_close: OnClose) -> None:
        self._on_message, self._on_close = on_message, on_close
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._stream())
        self.endpoint = await asyncio.shield(self._ready)

    async def _stream(self) -> None:
        assert self._ready is not None
        reason = "event stream ended"
        headers = {**self.headers, "Accept": "text/event-stream", "Cache-Control": "no-cache"}
        # the stream is idle between messages: no read timeout on it
        timeout = httpx.Timeout(self.post_timeout, connect=self.connect_timeout, read=None)
        try:
            async with self.http.stream("GET", self.url, headers=headers, timeout=timeout) as resp:
                if resp.status_code != 200:
                    raise TransportError(f"GET {self.url}: status {resp.status_code}")
                parser = SseParser()
                async for chunk in resp.aiter_bytes():
                    for event, data in parser.feed(chunk):
                        self._event(event, data)
                for event, data in parser.end():
                    self._event(event, data)
        except (httpx.HTTPError, TransportError) as e:
            reason = str(e) or e.__class__.__name__
        finally:
            if not self._ready.done():
                self._ready.set_exception(TransportError(f"no endpoint event: {reason}"))
            self._on_close(reason)

    def _event(self, event: str, data: bytes) -> None:
        assert self._ready is not None
        if event == "endpoint":
            endpoint = urljoin(self.url, data.decode("utf-8", "replace").strip())
            if not same_origin(self.url, endpoint):
                raise TransportError(f"endpoint {endpoint} is not on the origin of {self.url}")
            if not self._ready.done():
                self._ready.set_result(endpoint)
        elif event in ("", "message"):
            msg = _decode(data, self.name)
            if msg is not None:
                self._on_message(msg)

    def negotiated(self, version: str) -> None:
        return None

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if not self.endpoint:
            raise TransportError("not connected")
        try:
            resp = await self.http.post(
                self.endpoint,
                content=msgspec.json.encode(message),
                headers={**self.headers, "Content-Type": "application/json"},
                timeout=httpx.Timeout(self.post_timeout, connect=self.connect_timeout),
            )
        except httpx.ConnectTimeout:
            raise ConnectTimedOut(f"POST {self.endpoint}: connect timed out") from None
        except httpx.HTTPError as e:
            raise TransportError(f"POST {self.endpoint}: {e or e.__class__.__name__}") from None
        if resp.status_code >= 400:
            raise TransportError(f"POST {self.endpoint}: status {resp.status_code}: {resp.text[:200].strip()}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._ready is not None and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved, so asyncio does not warn about it


class StreamableHttpTransport:
    answers_inline = True
    stateless_capable = True

    def __init__(
        self, name: str, url: str, headers: Mapping[str, str], timeout: float, connect_timeout: float = 30.0
    ) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.session_id = ""
        self.protocol_version = ""
        self._closed = False
        self._pool: HttpPool | None = None
        self._head = b""
        self._on_message: OnMessage = _noop_message
        self._on_close: OnClose = _noop_close

    async def open(self, on_message: OnMessage, on_close: OnClose) -> None:
        try:
            pool = HttpPool(self.url, connect_timeout=min(self.connect_timeout, self.timeout))
            configured = valid_headers(self.headers)
        except ValueError as e:
            raise TransportError(str(e)) from None
        # What every POST shares, rendered once; send() adds the per-request headers.
        self._head = pool.head(
            "POST",
            self.url,
            [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"), *configured],
        )
        self._pool = pool
        self._on_message, self._on_close = on_message, on_close

    def negotiated(self, version: str) -> None:
        self.protocol_version = version

    def _lost(self, reason: str) -> TransportError:
        self._closed = True
        self._on_close(reason)
        return TransportError(reason)

    def _request_head(self, message: dict[str, Any], headers: Mapping[str, str] | None) -> bytes:
        lines: list[str] = []
        if self.session_id:
            lines.append(f"Mcp-Session-Id: {self.session_id}")
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        if isinstance(version, str) and version in MODERN_VERSIONS:
            # A stateless request: its headers mirror the body, for the server to route on without parsing it.
            assert isinstance(params, dict)
            method = str(message.get("method", ""))
            lines += [f"MCP-Protocol-Version: {version}", f"Mcp-Method: {method}"]
            key = NAME_BEARING.get(method)
            if key is not None and isinstance(params.get(key), str):
                lines.append(f"Mcp-Name: {encode_header_value(params[key])}")
        elif self.protocol_version:
            lines.append(f"MCP-Protocol-Version: {self.protocol_version}")
        if headers:
            lines += [f"{k}: {v}" for k, v in headers.items()]
        if not lines:
            return self._head
        return self._head + ("\r\n".join(lines) + "\r\n").encode("latin-1")

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        pool = self._pool
        if self._closed or pool is None:
            raise TransportError("session closed")
        body = msgspec.json.encode(message)
        try:
            resp = await pool.request(self._request_head(message, headers), body)
        except HttpTimeout as e:
            raise ConnectTimedOut(f"POST {self.url}: {e}") from None
        except (HttpError, OSError) as e:
            raise self._lost(f"POST {self.url}: {e or e.__class__.__name__}") from None
        try:
            await self._receive(resp, message)
        except (HttpError, OSError) as e:
            raise self._lost(f"POST {self.url}: {e or e.__class__.__name__}") from None
        finally:
            resp.close()

    async def _receive(self, resp: HttpResponse, message: dict[str, Any]) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid:
            if not sid.isascii() or not sid.isprintable() or " " in sid:
                raise self._lost(f"the server sent a session id that is not visible ASCII: {sid[:40]!r}")
            self.session_id = sid
        if resp.status == 404 and self.session_id:
            raise self._lost("the server no longer knows the session (404)")
        if resp.status >= 400:
            raw = await resp.read()
            answer = _json_or_none(raw)
            if isinstance(answer, dict) and isinstance(answer.get("error"), dict) and "id" in message:
                # A JSON-RPC error with an HTTP error status still answers the request (a POST carries one,
                # whatever id the server names: SDK 1.x says "server-error"): the caller gets "MCP error
                # <code>: <message>" rather than a bare status.
                answer["id"] = message["id"]
                self._on_message(answer)
                return
            body = raw[:300].decode("utf-8", "replace").strip()
            raise TransportError(f"POST {self.url}: status {resp.status}: {body}")
        if "text/event-stream" in resp.headers.get("content-type", ""):
            parser = SseParser()
            async for chunk in resp.chunks():
                for event, data in parser.feed(chunk):
                    self._event(event, data)
            for event, data in parser.end():
                self._event(event, data)
            return
        raw = await resp.read()  # read even when empty (202): the connection goes back to the pool
        if raw.strip() and resp.status != 202:
            msg = _decode(raw, self.name)
            if msg is not None:
                self._on_message(msg)

    def _event(self, event: str, data: bytes) -> None:
        if event in ("", "message") and data.strip():
            msg = _decode(data, self.name)
            if msg is not None:
                self._on_message(msg)

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            if self.session_id:
                # Ends the session server-side; best effort (a server without sessions answers 405).
                head = pool.head("DELETE", self.url, valid_headers(self.headers))
                head += f"Mcp-Session-Id: {self.session_id}\r\n".encode()
                if self.protocol_version:
                    head += f"MCP-Protocol-Version: {self.protocol_version}\r\n".encode()
                with contextlib.suppress(HttpError, OSError, TimeoutError):
                    async with asyncio.timeout(5.0):
                        resp = await pool.request(head, b"", method="DELETE")
                        try:
                            await resp.read()
                        finally:
                            resp.close()
        finally:
            await pool.aclose()
