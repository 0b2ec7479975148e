"""Small real HTTP servers on loopback speaking each LLM provider's API: Ollama, Anthropic Messages, OpenAI chat.

`reply` is the model's text for every request (a callable gets the decoded request body); the server records
what it received."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.http import serve_json

Reply = str | Callable[[dict[str, Any]], str]


def _text(reply: Reply, body: dict[str, Any]) -> str:
    return reply(body) if callable(reply) else reply


@contextmanager
def ollama(reply: Reply, status: int = 200) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    def handle(method: str, path: str, _h: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method != "POST" or path != "/api/generate":
            return 404, {"error": "not found"}
        body = json.loads(raw)
        if status != 200:
            return status, {"error": "model not loaded"}
        return 200, {"model": body["model"], "response": _text(reply, body), "done": True}

    with serve_json(handle) as served:
        yield served


@contextmanager
def anthropic(reply: Reply, key: str = "sk-ant-test") -> Iterator[tuple[str, list[dict[str, Any]]]]:
    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method != "POST" or path != "/v1/messages":
            return 404, {"type": "error", "error": {"type": "not_found_error", "message": path}}
        if headers.get("x-api-key") != key:
            return 401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
        if not headers.get("anthropic-version"):
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": "version"}}
        body = json.loads(raw)
        if not body.get("max_tokens") or not isinstance(body.get("messages"), list):
            return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad body"}}
        return 200, {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": _text(reply, body)}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }

    with serve_json(handle) as served:
        yield served


@contextmanager
def openai(reply: Reply, key: str = "sk-test") -> Iterator[tuple[str, list[dict[str, Any]]]]:
    def handle(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if method != "POST" or path != "/v1/chat/completions":
            return 404, {"error": {"message": f"unknown path {path}"}}
        if headers.get("authorization") != f"Bearer {key}":
            return 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
        body = json.loads(raw)
        return 200, {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": _text(reply, body)}, "finish_reason": "stop"}
            ],
        }

    with serve_json(handle) as served:
        yield served
