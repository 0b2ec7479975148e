"""Real HTTP servers on loopback that stream like an LLM API: OpenAI chat completions and Anthropic Messages.

A `script(body) -> steps` decides each answer from the decoded request (so a test can answer tool results):
a step is `("text", "...")` or `("tool", name, arguments_json)`; `("cut",)` ends the stream there, before the
API's own end (no finish_reason, no `[DONE]`, no `message_stop`); `("hold",)` sends what came before, then waits
(until the client goes away or `release` is set) and ends it the same way. The servers stream the steps the way
each API does (text in two deltas, tool-call arguments in two pieces), check the key, and record every request
body. Like the real APIs they refuse (HTTP 400) a conversation with a tool call left without its result. `fail`
makes the next requests answer an HTTP status first (to test retries and errors)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = tuple[str, ...]
Script = Callable[[dict[str, Any]], list[Step]]


@dataclass
class StreamingLLM:
    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    fail: list[int] = field(default_factory=list)  # statuses to answer, in order, before streaming again
    whole_calls: bool = False  # OpenAI: each tool call in one chunk without `index`, as some compatible servers do
    signatures: bool = False  # OpenAI: each tool call's first chunk carries Gemini's extra_content thought_signature
    held: threading.Event = field(default_factory=threading.Event)  # a ("hold",) step is holding its stream
    release: threading.Event = field(default_factory=threading.Event)  # let every held stream end


def _halves(text: str) -> list[str]:
    cut = max(1, len(text) // 2)
    return [p for p in (text[:cut], text[cut:]) if p]


def _openai_events(steps: list[Step], whole_calls: bool = False, signatures: bool = False) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake"}
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    calls = 0
    for step in steps:
        if step[0] in ("cut", "hold"):
            yield {"__stop__": step[0]}
            return
        if step[0] == "text":
            for piece in _halves(step[1]):
                yield {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
        else:
            _, name, arguments = step
            if whole_calls:
                call = {"id": f"call_{calls}", "type": "function", "function": {"name": name, "arguments": arguments}}
                yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
                calls += 1
                continue
            fn = {"name": name, "arguments": ""}
            head: dict[str, Any] = {"index": calls, "id": f"call_{calls}", "type": "function", "function": fn}
            if signatures:
                head["extra_content"] = {"google": {"thought_signature": f"sig-{calls}"}}
            yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]}
            for piece in _halves(arguments):
                part = {"index": calls, "function": {"arguments": piece}}
                yield {**base, "choices": [{"index": 0, "delta": {"tool_calls": [part]}}]}
            calls += 1
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]}
    yield {**base, "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}}


def _anthropic_events(steps: list[Step]) -> Iterator[dict[str, Any]]:
    yield {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "usage": {"input_tokens": 12}}}
    tools = 0
    for index, step in enumerate(steps):
        if step[0] in ("cut", "hold"):
            yield {"__stop__": step[0]}
            return
        if step[0] == "text":
            yield {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            for piece in _halves(step[1]):
                yield {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
        else:
            _, name, arguments = step
            block = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}
            yield {"type": "content_block_start", "index": index, "content_block": block}
            for piece in _halves(arguments):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield {"type": "content_block_delta", "index": index, "delta": delta}
            tools += 1
        yield {"type": "content_block_stop", "index": index}
    stop = "tool_use" if tools else "end_turn"
    yield {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 7}}
    yield {"type": "message_stop"}


@contextmanager
def _serve(kind: str, script: Script, key: str) -> Iterator[StreamingLLM]:
    llm = StreamingLLM(url="")
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"

    class _H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            llm.bodies.append(body)
            authorised = (
                self.headers.get("authorization") == f"Bearer {key}"
                if kind == "openai"
                else self.headers.get("x-api-key") == key and bool(self.headers.get("anthropic-version"))
            )
            if self.path != path:
                return self._json(404, {"error": {"message": f"unknown path {self.path}"}})
            if not authorised:
                return self._json(401, {"error": {"type": "authentication_error", "message": "invalid key"}})
            if llm.fail:
                return self._json(llm.fail.pop(0), {"error": {"type": "overloaded_error", "message": "busy"}})
            unanswered = _unanswered(body, kind)
            if unanswered:
                message = f"tool call {unanswered} has no result: every tool call must be answered"
                return self._json(400, {"error": {"type": "invalid_request_error", "message": message}})
            steps = script(body)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            events = (
                _openai_events(steps, llm.whole_calls, llm.signatures) if kind == "openai" else _anthropic_events(steps)
            )
            for event in events:
                if "__stop__" in event:
                    if event["__stop__"] == "hold":
                        self._hold()
                    return  # HTTP/1.0: the connection closes here, before the stream's own end
                prefix = f"event: {event['type']}\n" if kind == "anthropic" else ""
                self.wfile.write(f"{prefix}data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            if kind == "openai":
                self.wfile.write(b"data: [DONE]\n\n")

        def _hold(self) -> None:
            """Wait until released or until the client has gone (its socket reads as closed)."""
            import select

            llm.held.set()
            while not llm.release.is_set():
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, 0x2):  # MSG_PEEK: b"" once the client closed
                    return

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _H)
    llm.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield llm
    finally:
        llm.release.set()
        server.shutdown()
        server.server_close()


@contextmanager
def openai_stream(script: Script, key: str = "sk-test") -> Iterator[StreamingLLM]:
    with _serve("openai", script, key) as llm:
        yield llm


@contextmanager
def anthropic_stream(script: Script, key: str = "sk-ant-test") -> Iterator[StreamingLLM]:
    with _serve("anthropic", script, key) as llm:
        yield llm


def _unanswered(body: dict[str, Any], kind: str) -> str:
    """The id of the first tool call the conversation leaves without a result ("" when there is none)."""
    messages = body.get("messages") or []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        if kind == "openai":
            ids = [c.get("id") for c in m.get("tool_calls") or []]
            answered = set()
            for after in messages[i + 1 :]:
                if after.get("role") != "tool":
                    break
                answered.add(after.get("tool_call_id"))
        else:
            content = m.get("content") if isinstance(m.get("content"), list) else []
            ids = [b.get("id") for b in content if b.get("type") == "tool_use"]
            following = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = (
                {b.get("tool_use_id") for b in following if isinstance(b, dict)}
                if isinstance(following, list)
                else set()
            )
        missing = [x for x in ids if x not in answered]
        if missing:
            return str(missing[0])
    return ""


def last_tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results at the end of a request, in either API's shape ([] when the last turn is the user's)."""
    messages = body.get("messages") or []
    if not messages:
        return []
    if "max_tokens" in body:  # Anthropic: tool results are a user turn of tool_result blocks
        content = messages[-1].get("content")
        if isinstance(content, list):
            return [str(b.get("content")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return []
    tail: list[str] = []
    for m in reversed(messages):
        if m.get("role") != "tool":
            break
        tail.insert(0, str(m.get("content")))
    return tail
