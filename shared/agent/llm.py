"""Streaming chat with tools: OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, LM Studio...) and the
Anthropic Messages API, behind one interface.

`await chat.stream(system, messages, tools)` yields the stream's events: `TextDelta` (TEXT_DELTA) as the model
writes, `ToolCallStart` (TOOL_CALL_START, once a call's name is known), `ToolCallDelta` (TOOL_CALL_DELTA, its
arguments as they arrive), `ToolCallDone` (TOOL_CALL_COMPLETE, the whole call) and a final
`Finished(stop_reason, usage)` (MESSAGE_COMPLETE). A refused request (HTTP status,
an error event, a connection that fails) raises `LLMError`; 429, 5xx and connection errors are retried with
exponential backoff before the first byte of an answer, never after (a half-streamed answer is not replayed), and
each retry is announced with a `Retrying` event. A stream that ends before the model said it was done (OpenAI's
`finish_reason` or `[DONE]`, Anthropic's `message_stop`) is not an answer: asked again once when nothing of it
was shown yet, otherwise an `LLMError`. A model that says nothing for `timeout` seconds is an `LLMError` naming
the timeout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from flux7.shared.agent.conversation import Message, ToolCall, ToolSpec
from flux7.shared.openai_compat import openai_path

__all__ = [
    "DEFAULT_URLS",
    "AnthropicChat",
    "Chat",
    "Finished",
    "LLMError",
    "OpenAIChat",
    "Retrying",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallDone",
    "ToolCallStart",
    "make_chat",
]

DEFAULT_URLS = {
    "openai": "https://api.openai.com/v1",
    "ollama": "http://localhost:11434/v1",  # Ollama's OpenAI-compatible endpoint
    "anthropic": "https://api.anthropic.com",
}
_RETRY_STATUS = {429, 500, 502, 503, 504, 529}


class LLMError(Exception):
    """The model could not be asked, or refused the request."""


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments: str  # the next piece of the arguments' JSON text


@dataclass(frozen=True)
class ToolCallDone:
    call: ToolCall


@dataclass(frozen=True)
class Finished:
    stop_reason: str
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Retrying:
    """The request is about to be sent again: why, and after how many seconds."""

    why: str
    delay: float
    attempt: int  # the attempt about to be made, 2 for the first retry
    attempts: int  # how many there may be in all


StreamEvent = TextDelta | ToolCallStart | ToolCallDelta | ToolCallDone | Finished | Retrying


class _StreamCut(Exception):
    """The stream ended (or broke) before the model said its answer was complete."""


class Chat(Protocol):
    model: str

    def stream(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AsyncIterator[StreamEvent]:
        """The model's answer to the conversation, streamed."""
        ...

    async def aclose(self) -> None: ...


class _StreamingClient:
    def __init__(
        self,
        model: str,
        url: str,
        api_key: str = "",
        *,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
        temperature: float | None = None,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.retries = max(0, retries)
        self.backoff = backoff
        self.timeout = timeout
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0), transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _lines(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> AsyncIterator[str | Retrying]:
        """The response's lines, after retrying what is worth retrying (each retry announced first)."""
        attempt = 0
        while True:
            started = False
            try:
                async with self._client.stream("POST", url, json=body, headers=headers) as resp:
                    if resp.status_code != 200:
                        detail = (await resp.aread()).decode("utf-8", "replace")[:300]
                        if resp.status_code in _RETRY_STATUS and attempt < self.retries:
                            raise _Retry(f"HTTP {resp.status_code}: {detail}")
                        raise LLMError(f"{url}: HTTP {resp.status_code}: {detail}")
                    started = True
                    async for line in resp.aiter_lines():
                        yield line
                    return
            except (_Retry, httpx.ConnectError, httpx.ConnectTimeout) as e:
                if attempt >= self.retries:
                    raise LLMError(f"{url}: {_said(e)}") from e
                why = str(e) if isinstance(e, _Retry) else _said(e)
            except httpx.TimeoutException as e:
                raise LLMError(
                    f"{url}: the model did not answer within {self.timeout:g} s ({e.__class__.__name__}; the "
                    "llm_timeout setting changes it)"
                ) from e
            except httpx.HTTPError as e:
                if started:  # broken mid-answer: a cut stream, which the caller may ask again once
                    raise _StreamCut(_said(e)) from e
                raise LLMError(f"{url}: {_said(e)}") from e
            delay = self.backoff * 2**attempt
            attempt += 1
            yield Retrying(why, delay, attempt + 1, self.retries + 1)
            await asyncio.sleep(delay)

    async def stream(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[StreamEvent]:
        """`_answer`, asked once more when its stream is cut before anything of it was shown."""
        for again in (False, True):
            shown = False
            try:
                async for event in self._answer(system, messages, tools):
                    shown = shown or isinstance(event, TextDelta | ToolCallStart | ToolCallDelta)
                    yield event
                return
            except _StreamCut as e:
                if shown or again:
                    raise LLMError(
                        f"the model's answer was cut off before it ended ({e}): it is incomplete and was not used"
                    ) from e
                yield Retrying(f"the model's stream ended before it answered ({e})", 0.0, 2, 2)

    def _answer(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[StreamEvent]:
        raise NotImplementedError


def _said(e: BaseException) -> str:
    """An exception as a person reads it: its class, and its message when it has one (httpx's often has none)."""
    text = str(e).strip()
    return f"{e.__class__.__name__}: {text}" if text else e.__class__.__name__


class _Retry(Exception):
    pass


_DONE = object()  # `[DONE]`: the OpenAI-compatible stream's own end


def _sse_data(lines: AsyncIterator[str | Retrying]) -> AsyncIterator[Any]:
    """The JSON payload of each `data:` line of a server-sent event stream (`[DONE]` is passed on as `_DONE` and
    ends it), and the `Retrying` notices in between."""

    async def events() -> AsyncIterator[Any]:
        async for line in lines:
            if isinstance(line, Retrying):
                yield line
                continue
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                yield _DONE
                return
            if not data:
                continue
            try:
                yield json.loads(data)
            except ValueError as e:
                raise LLMError(f"the model's stream sent a line that is not JSON: {data[:120]}") from e

    return events()


class OpenAIChat(_StreamingClient):
    """`POST <url>/chat/completions` with `stream: true` (the url is the API base, e.g. `.../v1`)."""

    def _endpoint(self) -> str:
        return self.url + openai_path(self.url, "chat/completions")

    def _body(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for m in messages:
            if m.role == "user":
                wire.append({"role": "user", "content": m.text})
            elif m.role == "assistant":
                turn: dict[str, Any] = {"role": "assistant", "content": m.text or None}
                if m.tool_calls:
                    turn["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                            **c.extra,
                        }
                        for c in m.tool_calls
                    ]
                wire.append(turn)
            else:
                wire += [{"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in m.results]
        body: dict[str, Any] = {"model": self.model, "messages": wire, "stream": True}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        return body

    async def _answer(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[StreamEvent]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        calls: dict[int, dict[str, str]] = {}
        extras: dict[int, dict[str, Any]] = {}
        stop, usage = "stop", {}
        ended = False  # a finish_reason or [DONE]: the model said it was done
        async for chunk in _sse_data(self._lines(self._endpoint(), self._body(system, messages, tools), headers)):
            if isinstance(chunk, Retrying):
                yield chunk
                continue
            if chunk is _DONE:
                ended = True
                break
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                raise LLMError(f"the model answered with an error: {json.dumps(chunk['error'])[:300]}")
            if chunk.get("usage"):
                u = chunk["usage"]
                usage = {
                    "input_tokens": int(u.get("prompt_tokens", 0)),
                    "output_tokens": int(u.get("completion_tokens", 0)),
                }
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield TextDelta(str(delta["content"]))
                for part in delta.get("tool_calls") or []:
                    index = _call_index(part, calls)
                    slot = calls.setdefault(index, {"id": "", "name": "", "arguments": "", "started": ""})
                    if isinstance(part.get("extra_content"), dict):  # kept whole, sent back with the call
                        extras.setdefault(index, {})["extra_content"] = part["extra_content"]
                    fn = part.get("function") or {}
                    slot["id"] = part.get("id") or slot["id"]
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
                    if slot["name"] and not slot["started"]:
                        slot["started"] = "1"
                        yield ToolCallStart(index, slot["id"] or f"call_{index}", slot["name"])
                    if fn.get("arguments"):
                        yield ToolCallDelta(index, str(fn["arguments"]))
                if choice.get("finish_reason"):
                    stop = str(choice["finish_reason"])
                    ended = True
        if not ended:
            raise _StreamCut("no finish_reason nor [DONE]")
        for index in sorted(calls):
            slot = calls[index]
            arguments = slot["arguments"] or "{}"
            yield ToolCallDone(ToolCall(slot["id"] or f"call_{index}", slot["name"], arguments, extras.get(index, {})))
        yield Finished(stop, usage)


class AnthropicChat(_StreamingClient):
    """`POST <url>/v1/messages` with `stream: true`."""

    max_tokens = 4096

    def _body(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "user":
                wire.append({"role": "user", "content": m.text})
            elif m.role == "assistant":
                blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": _object_or_empty(c.arguments)}
                    for c in m.tool_calls
                ]
                wire.append({"role": "assistant", "content": blocks})
            else:
                results = [
                    {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
                    for r in m.results
                ]
                wire.append({"role": "user", "content": results})
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": wire, "stream": True}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
            ]
        return body

    async def _answer(
        self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> AsyncIterator[StreamEvent]:
        headers = {"anthropic-version": "2023-06-01"}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        blocks: dict[int, dict[str, str]] = {}
        stop, usage = "end_turn", {"input_tokens": 0, "output_tokens": 0}
        lines = self._lines(f"{self.url}/v1/messages", self._body(system, messages, tools), headers)
        ended = False  # message_stop: the model said it was done
        async for event in _sse_data(lines):
            if isinstance(event, Retrying):
                yield event
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == "error":
                raise LLMError(f"the model answered with an error: {json.dumps(event.get('error'))[:300]}")
            if kind == "message_start":
                usage["input_tokens"] = int((event.get("message") or {}).get("usage", {}).get("input_tokens", 0))
            elif kind == "content_block_start":
                block = event.get("content_block") or {}
                if block.get("type") == "tool_use":
                    index = int(event.get("index", 0))
                    blocks[index] = {"id": block.get("id", ""), "name": block.get("name", ""), "json": ""}
                    yield ToolCallStart(index, blocks[index]["id"], blocks[index]["name"])
            elif kind == "content_block_delta":
                delta = event.get("delta") or {}
                if delta.get("type") == "text_delta" and delta.get("text"):
                    yield TextDelta(str(delta["text"]))
                elif delta.get("type") == "input_json_delta":
                    slot = blocks.get(int(event.get("index", 0)))
                    if slot is not None and delta.get("partial_json"):
                        slot["json"] += delta["partial_json"]
                        yield ToolCallDelta(int(event.get("index", 0)), str(delta["partial_json"]))
            elif kind == "content_block_stop":
                slot = blocks.pop(int(event.get("index", 0)), None)
                if slot is not None:
                    yield ToolCallDone(ToolCall(slot["id"], slot["name"], slot["json"] or "{}"))
            elif kind == "message_delta":
                stop = str((event.get("delta") or {}).get("stop_reason") or stop)
                usage["output_tokens"] = int((event.get("usage") or {}).get("output_tokens", usage["output_tokens"]))
            elif kind == "message_stop":
                ended = True
        if not ended:
            raise _StreamCut("no message_stop")
        yield Finished(stop, usage)


def _call_index(part: dict[str, Any], calls: dict[int, dict[str, str]]) -> int:
    """Which tool call a streamed piece belongs to. Servers that leave out `index` (some OpenAI-compatible ones
    send each call whole) start a new call with each new id."""
    if part.get("index") is not None:
        return int(part["index"])
    last = max(calls, default=-1)
    if last < 0 or (part.get("id") and part["id"] != calls[last]["id"]):
        return last + 1
    return last


def _object_or_empty(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def make_chat(
    provider: str,
    model: str,
    *,
    url: str = "",
    api_key: str = "",
    timeout: float = 120.0,
    retries: int = 3,
    backoff: float = 1.0,
    transport: httpx.AsyncBaseTransport | None = None,
    temperature: float | None = None,
) -> Chat:
    """The client for `provider` (openai | ollama | anthropic); `url` defaults to the provider's public API."""
    if provider not in DEFAULT_URLS:
        raise ValueError(f"unknown LLM provider {provider!r} (known: {', '.join(sorted(DEFAULT_URLS))})")
    kind = AnthropicChat if provider == "anthropic" else OpenAIChat
    return kind(
        model,
        url or DEFAULT_URLS[provider],
        api_key,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        transport=transport,
        temperature=temperature,
    )
