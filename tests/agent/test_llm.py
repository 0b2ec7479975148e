"""The streaming clients against real loopback servers speaking each API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flux7.shared.agent.conversation import Message, ToolCall, ToolResult, ToolSpec
from flux7.shared.agent.llm import (
    Finished,
    LLMError,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    make_chat,
)
from tests.agent.llm_stream_servers import anthropic_stream, openai_stream

PETS = ToolSpec("list_pets", "List pets", {"type": "object", "properties": {"limit": {"type": "integer"}}})
HISTORY = [
    Message("user", "how many pets?"),
    Message("assistant", "Let me look.", tool_calls=[ToolCall("call_9", "list_pets", '{"limit": 2}')]),
    Message("tool", results=[ToolResult("call_9", '[{"id": 1}]'), ToolResult("call_10", "refused", True)]),
]


async def collect(chat: Any, messages: list[Message], tools: list[ToolSpec]) -> list[StreamEvent]:
    try:
        return [e async for e in chat.stream("be brief", messages, tools)]
    finally:
        await chat.aclose()


def two_steps(_body: dict[str, Any]) -> list[tuple[str, ...]]:
    return [("text", "Checking the pets."), ("tool", "list_pets", '{"limit": 2}'), ("tool", "get_pet", '{"id": "1"}')]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_text_and_tool_calls_arrive_whole_from_a_stream(provider: str) -> None:
    serve, key = (openai_stream, "sk-test") if provider == "openai" else (anthropic_stream, "sk-ant-test")
    with serve(two_steps) as llm:
        events = await collect(make_chat(provider, "m1", url=llm.url, api_key=key), [Message("user", "hi")], [PETS])
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [e.call for e in events if isinstance(e, ToolCallDone)]
    assert text == "Checking the pets."
    assert len([e for e in events if isinstance(e, TextDelta)]) == 2  # streamed, not buffered
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("list_pets", {"limit": 2}), ("get_pet", {"id": "1"})]
    assert all(c.id for c in calls) and len({c.id for c in calls}) == 2
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.usage == {"input_tokens": 12, "output_tokens": 7}
    assert finished.stop_reason == ("tool_calls" if provider == "openai" else "tool_use")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_tool_call_streams_its_start_then_its_arguments_piece_by_piece(provider: str) -> None:
    serve, key = (openai_stream, "sk-test") if provider == "openai" else (anthropic_stream, "sk-ant-test")
    with serve(two_steps) as llm:
        events = await collect(make_chat(provider, "m1", url=llm.url, api_key=key), [Message("user", "hi")], [PETS])
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [e.name for e in starts] == ["list_pets", "get_pet"]
    for start, done in zip(starts, [e.call for e in events if isinstance(e, ToolCallDone)], strict=True):
        pieces = [e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == start.index]
        assert len(pieces) == 2 and "".join(pieces) == done.arguments  # the arguments as they arrived
        assert start.id == done.id
        # TOOL_CALL_START comes before its deltas, which come before TOOL_CALL_COMPLETE
        first_delta = next(i for i, e in enumerate(events) if isinstance(e, ToolCallDelta) and e.index == start.index)
        done_at = next(i for i, e in enumerate(events) if isinstance(e, ToolCallDone) and e.call.id == done.id)
        assert events.index(start) < first_delta < done_at
    assert isinstance(events[-1], Finished)  # MESSAGE_COMPLETE, with the usage


async def test_tool_calls_sent_whole_without_an_index_stay_apart() -> None:
    with openai_stream(two_steps) as llm:
        llm.whole_calls = True
        events = await collect(make_chat("openai", "m", url=llm.url, api_key="sk-test"), [Message("user", "hi")], [])
    calls = [e.call for e in events if isinstance(e, ToolCallDone)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_0", "list_pets", '{"limit": 2}'),
        ("call_1", "get_pet", '{"id": "1"}'),
    ]


async def test_openai_request_carries_the_conversation_and_tools_in_its_shape() -> None:
    with openai_stream(lambda _b: [("text", "ok")]) as llm:
        await collect(make_chat("openai", "gpt-x", url=llm.url + "/v1", api_key="sk-test"), HISTORY, [PETS])
    body = llm.bodies[0]
    assert body["model"] == "gpt-x" and body["stream"] is True
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["messages"][2]["tool_calls"][0] == {
        "id": "call_9",
        "type": "function",
        "function": {"name": "list_pets", "arguments": '{"limit": 2}'},
    }
    assert body["messages"][3:] == [
        {"role": "tool", "tool_call_id": "call_9", "content": '[{"id": 1}]'},
        {"role": "tool", "tool_call_id": "call_10", "content": "refused"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "list_pets", "description": "List pets", "parameters": PETS.parameters},
        }
    ]


async def test_anthropic_request_carries_the_conversation_and_tools_in_its_shape() -> None:
    with anthropic_stream(lambda _b: [("text", "ok")]) as llm:
        await collect(make_chat("anthropic", "claude-x", url=llm.url, api_key="sk-ant-test"), HISTORY, [PETS])
    body = llm.bodies[0]
    assert body["system"] == "be brief" and body["max_tokens"] > 0 and body["stream"] is True
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_9", "name": "list_pets", "input": {"limit": 2}},
        ],
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_9", "content": '[{"id": 1}]', "is_error": False},
            {"type": "tool_result", "tool_use_id": "call_10", "content": "refused", "is_error": True},
        ],
    }
    assert body["tools"] == [{"name": "list_pets", "description": "List pets", "input_schema": PETS.parameters}]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_wrong_key_is_an_error_naming_the_status(provider: str) -> None:
    serve = openai_stream if provider == "openai" else anthropic_stream
    with serve(two_steps) as llm, pytest.raises(LLMError, match="HTTP 401"):
        await collect(make_chat(provider, "m", url=llm.url, api_key="wrong", backoff=0), [Message("user", "x")], [])
    assert len(llm.bodies) == 1  # an authentication failure is not retried


async def test_overload_is_retried_then_answered() -> None:
    with anthropic_stream(lambda _b: [("text", "fine")]) as llm:
        llm.fail += [529, 503]
        chat = make_chat("anthropic", "m", url=llm.url, api_key="sk-ant-test", backoff=0)
        events = await collect(chat, [Message("user", "x")], [])
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "fine"
    assert len(llm.bodies) == 3


async def test_retries_give_up_with_the_last_status() -> None:
    with openai_stream(lambda _b: [("text", "never")]) as llm:
        llm.fail += [503, 503, 503]
        chat = make_chat("openai", "m", url=llm.url, api_key="sk-test", retries=2, backoff=0)
        with pytest.raises(LLMError, match="503"):
            await collect(chat, [Message("user", "x")], [])
    assert len(llm.bodies) == 3


async def test_an_unreachable_model_is_an_error_not_a_hang() -> None:
    chat = make_chat("ollama", "llama", url="http://127.0.0.1:9", retries=1, backoff=0)
    with pytest.raises(LLMError, match="ConnectError"):
        await collect(chat, [Message("user", "x")], [])


def test_an_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown LLM provider 'gemini'"):
        make_chat("gemini", "m")


async def test_gemini_thought_signatures_go_back_with_their_calls() -> None:
    with openai_stream(two_steps) as llm:
        llm.signatures = True
        events = await collect(make_chat("openai", "m", url=llm.url, api_key="sk-test"), [Message("user", "hi")], [])
        calls = [e.call for e in events if isinstance(e, ToolCallDone)]
        assert [c.extra for c in calls] == [
            {"extra_content": {"google": {"thought_signature": "sig-0"}}},
            {"extra_content": {"google": {"thought_signature": "sig-1"}}},
        ]
        history = [Message("user", "hi"), Message("assistant", "", tool_calls=calls)]
        history.append(Message("tool", results=[ToolResult(c.id, "ok") for c in calls]))
        await collect(make_chat("openai", "m", url=llm.url, api_key="sk-test"), history, [])
    sent = llm.bodies[-1]["messages"][2]["tool_calls"]  # after the system prompt and the user's message
    assert [c["extra_content"]["google"]["thought_signature"] for c in sent] == ["sig-0", "sig-1"]
