"""The context engine's estimate and its first resort: pruning large tool outputs of earlier prompts, which needs
no model (the chat here points at a closed port: asking it would fail the test)."""

from __future__ import annotations

from flux7.shared.agent.context import ContextEngine, estimate_tokens
from flux7.shared.agent.conversation import Message, ToolCall, ToolResult
from flux7.shared.agent.llm import make_chat


def conversation(big: int) -> list[Message]:
    return [
        Message("user", "read the log"),
        Message("assistant", "", tool_calls=[ToolCall("c1", "read_file", '{"path": "app.log"}')]),
        Message("tool", results=[ToolResult("c1", "x" * big)]),
        Message("assistant", "The log is long."),
        Message("user", "now what?"),
    ]


def test_the_estimate_is_four_characters_a_token() -> None:
    assert estimate_tokens([Message("user", "a" * 400)], system="b" * 400) == 200
    assert estimate_tokens(conversation(4000)) == (12 + 9 + 18 + 4000 + 16 + 9) // 4


async def test_pruning_old_tool_outputs_comes_first_and_may_be_enough() -> None:
    chat = make_chat("openai", "m", url="http://127.0.0.1:9", api_key="k", retries=0)
    messages = conversation(20_000)
    engine = ContextEngine(window=4000, compact_at=0.5)  # 2,000 tokens: the 20,000-character output is over
    done = await engine.compact(chat, messages, 4, "", [])
    assert done is not None and (done.pruned, done.summarized) == (1, 0) and done.after < 2000 < done.before
    assert messages[2].results[0].content == "[output pruned to save context: 20000 characters]"
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant", "user"]  # nothing else changed
    assert await engine.compact(chat, conversation(100), 4, "", []) is None  # under the limit: untouched
    await chat.aclose()
