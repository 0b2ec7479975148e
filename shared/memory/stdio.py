"""`mem7` as an MCP stdio server (CONTRACT 2.1): line JSON-RPC on stdin/stdout, lines up to 4 MB,
unparsable lines and notifications skipped (a line nested deeper than the JSON limit answers a parse error).
When a daemon already answers, every request is relayed to its /rpc instead, so one process owns the
workspace."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import BinaryIO

import httpx
import msgspec

from flux7.shared.json_depth import too_deep
from flux7.shared.memory.jsonrpc import dispatch, error_answer
from flux7.shared.memory.service import MemoryService

__all__ = ["MAX_LINE", "daemon_answers", "relay_stdio", "serve_stdio"]

log = logging.getLogger("flux7.memory")

MAX_LINE = 4 * 1024 * 1024


def _next_request(stdin: BinaryIO) -> bytes | None:
    """The next line that holds a request with an id; None at end of input."""
    while True:
        line = stdin.readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # an overlong line is skipped whole
                line = stdin.readline(MAX_LINE + 1)
            continue
        line = line.strip()
        if not line:
            continue
        if too_deep(line):
            return line  # decoding it would overflow the stack: dispatch answers a parse error saying why
        try:
            message = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if isinstance(message, dict) and "id" in message:
            return line


def _loop(stdin: BinaryIO, stdout: BinaryIO, answer: Callable[[bytes], bytes]) -> None:
    while (request := _next_request(stdin)) is not None:
        stdout.write(answer(request) + b"\n")
        stdout.flush()


def serve_stdio(service: MemoryService, stdin: BinaryIO, stdout: BinaryIO) -> None:
    # Local stdio carries no identity: the caller is not scoped (CONTRACT 2.6).
    _loop(stdin, stdout, lambda line: msgspec.json.encode(dispatch(service, line, authenticated=False).body))


def daemon_answers(base_url: str, timeout: float = 0.5) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def relay_stdio(base_url: str, token: str, stdin: BinaryIO, stdout: BinaryIO) -> None:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0) as client:

        def answer(line: bytes) -> bytes:
            try:
                response = client.post("/rpc", content=line)
                response.raise_for_status()
                return response.content.strip()
            except httpx.HTTPError as e:
                log.warning("relay to %s failed: %s", base_url, e)
                request_id = None if too_deep(line) else msgspec.json.decode(line).get("id")
                failed = error_answer(-32603, f"relay to {base_url} failed: {e}", request_id=request_id, has_id=True)
                return msgspec.json.encode(failed.body)

        _loop(stdin, stdout, answer)


def main_stdio(service_factory: Callable[[], MemoryService], base_url: str, token: str) -> None:
    if daemon_answers(base_url):
        log.info("a mem7 daemon answers at %s: relaying stdio to it", base_url)
        relay_stdio(base_url, token, sys.stdin.buffer, sys.stdout.buffer)
        return
    service = service_factory()
    try:
        serve_stdio(service, sys.stdin.buffer, sys.stdout.buffer)
    finally:
        service.close()
