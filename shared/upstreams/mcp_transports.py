"""The three ways to reach an upstream MCP server: stdio (a child process speaking line JSON), SSE (a GET
event stream plus POSTs to the endpoint it names) and Streamable HTTP (a POST per message, answered by JSON or
by an event stream). Each delivers decoded messages to the session and reports its end once."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import msgspec

from .mcp_session import OnClose, OnMessage, TransportError

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


async def _sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream; `event` is "" when the server names none."""
    event, data = "", list[str]()
    async for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
    if data:
        yield event, "\n".join(data)


class StdioTransport:
    answers_inline = False

    def __init__(
        self, name: str, command: str, args: tuple[str, ...], env: Mapping[str, str], cwd: str | None
    ) -> None:
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

    async def send(self, message: dict[str, Any]) -> None:
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

    def __init__(
        self, name: str, url: str, headers: Mapping[str, str], http: httpx.AsyncClient, post_timeout: float
    ) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.http = http
        self.post_timeout = post_timeout
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
        timeout = httpx.Timeout(self.post_timeout, read=None)  # the stream is idle between messages
        try:
            async with self.http.stream("GET", self.url, headers=headers, timeout=timeout) as resp:
                if resp.status_code != 200:
                    raise TransportError(f"GET {self.url}: status {resp.status_code}")
                async for event, data in _sse_events(resp.aiter_lines()):
                    if event == "endpoint":
                        endpoint = urljoin(self.url, data.strip())
                        if not same_origin(self.url, endpoint):
                            raise TransportError(f"endpoint {endpoint} is not on the origin of {self.url}")
                        if not self._ready.done():
                            self._ready.set_result(endpoint)
                    elif event in ("", "message"):
                        msg = _decode(data, self.name)
                        if msg is not None:
                            self._on_message(msg)
        except (httpx.HTTPError, TransportError) as e:
            reason = str(e) or e.__class__.__name__
        finally:
            if not self._ready.done():
                self._ready.set_exception(TransportError(f"no endpoint event: {reason}"))
            self._on_close(reason)

    async def send(self, message: dict[str, Any]) -> None:
        if not self.endpoint:
            raise TransportError("not connected")
        try:
            resp = await self.http.post(
                self.endpoint,
                content=msgspec.json.encode(message),
                headers={**self.headers, "Content-Type": "application/json"},
                timeout=self.post_timeout,
            )
        except httpx.HTTPError as e:
            raise TransportError(f"POST {self.endpoint}: {e or e.__class__.__name__}") from None
        if resp.status_code >= 400:
            raise TransportError(
                f"POST {self.endpoint}: status {resp.status_code}: {resp.text[:200].strip()}"
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._ready is not None and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved, so asyncio does not warn about it


class StreamableHttpTransport:
    answers_inline = True

    def __init__(
        self, name: str, url: str, headers: Mapping[str, str], http: httpx.AsyncClient, timeout: float
    ) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.http = http
        self.timeout = timeout
        self.session_id = ""
        self.protocol_version = ""
        self._closed = False
        self._on_message: OnMessage = _noop_message
        self._on_close: OnClose = _noop_close

    async def open(self, on_message: OnMessage, on_close: OnClose) -> None:
        if urlsplit(self.url).scheme not in ("http", "https"):
            raise TransportError(f"endpoint must be http or https: {self.url}")
        self._on_message, self._on_close = on_message, on_close

    def _lost(self, reason: str) -> TransportError:
        self._closed = True
        self._on_close(reason)
        return TransportError(reason)

    async def send(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise TransportError("session closed")
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        request = self.http.build_request(
            "POST", self.url, content=msgspec.json.encode(message), headers=headers, timeout=self.timeout
        )
        try:
            resp = await self.http.send(request, stream=True)
        except httpx.TimeoutException as e:
            raise TransportError(f"POST {self.url}: {e.__class__.__name__}") from None
        except httpx.HTTPError as e:
            raise self._lost(f"POST {self.url}: {e or e.__class__.__name__}") from None
        try:
            await self._receive(resp, message)
        except httpx.TimeoutException as e:
            raise TransportError(f"POST {self.url}: {e.__class__.__name__}") from None
        except httpx.HTTPError as e:
            raise self._lost(f"POST {self.url}: {e or e.__class__.__name__}") from None
        finally:
            await resp.aclose()

    async def _receive(self, resp: httpx.Response, message: dict[str, Any]) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid:
            self.session_id = sid
        if resp.status_code == 404 and self.session_id:
            raise self._lost("the server no longer knows the session (404)")
        if resp.status_code >= 400:
            raw = await resp.aread()
            answer = _json_or_none(raw)
            if isinstance(answer, dict) and isinstance(answer.get("error"), dict) and "id" in message:
                # A JSON-RPC error with an HTTP error status still answers the request: the caller gets
                # "MCP error <code>: <message>" rather than a bare status.
                answer["id"] = message["id"] if answer.get("id") is None else answer["id"]
                self._on_message(answer)
                return
            body = raw[:300].decode("utf-8", "replace").strip()
            raise TransportError(f"POST {self.url}: status {resp.status_code}: {body}")
        if resp.status_code == 202:
            return
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" in ctype:
            async for event, data in _sse_events(resp.aiter_lines()):
                if event in ("", "message") and data.strip():
                    self._deliver(_decode(data, self.name), message)
        else:
            raw = await resp.aread()
            if raw.strip():
                self._deliver(_decode(raw, self.name), message)

    def _deliver(self, msg: Any, sent: dict[str, Any]) -> None:
        if msg is None:
            return
        if sent.get("method") == "initialize" and isinstance(msg, dict) and msg.get("id") == sent.get("id"):
            result = msg.get("result")
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self.protocol_version = result["protocolVersion"]
        self._on_message(msg)

    async def close(self) -> None:
        self._closed = True
        if not self.session_id:
            return
        # Ends the session server-side; best effort (a server without sessions answers 405).
        with contextlib.suppress(httpx.HTTPError):
            await self.http.delete(
                self.url, headers={**self.headers, "Mcp-Session-Id": self.session_id}, timeout=5.0
            )
