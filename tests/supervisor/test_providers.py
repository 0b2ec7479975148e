from __future__ import annotations

import json

import pytest

from flux7.shared.supervisor.config import ProviderConfig
from flux7.shared.supervisor.providers import ProviderChain, Verdict, parse_reply
from tests.supervisor import llm_servers
from tests.support.http import free_port

CTX = {"id": "a1", "tool": "fs.write_file", "agent_id": "claude", "params": {"path": "/tmp/x"}, "policy_rule": "p"}
APPROVE = "DECISION: APPROVE | CONFIDENCE: 0.92 | REASONING: a temp file in the sandbox"


def test_the_reply_format_is_parsed_from_any_line() -> None:
    assert parse_reply("thinking...\n" + APPROVE) == Verdict("approve", 0.92, "a temp file in the sandbox")
    assert parse_reply("decision: deny | confidence: 1 | reasoning: no") == Verdict("deny", 1.0, "no")
    assert parse_reply("DECISION: ESCALATE | CONFIDENCE: .5 | REASONING: unsure").action == "escalate"
    assert parse_reply("I would approve this") is None
    assert parse_reply("DECISION: APPROVE | CONFIDENCE: 7 | REASONING: sure") is None
    assert parse_reply("DECISION: MAYBE | CONFIDENCE: 0.9 | REASONING: hm") is None


async def test_ollama_generate_is_asked_with_model_prompt_and_no_stream() -> None:
    with llm_servers.ollama(APPROVE) as (url, seen):
        chain = ProviderChain([ProviderConfig(provider="ollama", model="qwen3:14b", url=url)], "SYS")
        verdict = await chain.evaluate(CTX)
        await chain.aclose()
    assert verdict is not None and (verdict.action, verdict.confidence) == ("approve", 0.92)
    assert verdict.reasoning == "[ollama] a temp file in the sandbox" and verdict.source == "ollama"
    body = json.loads(seen[0]["body"])
    assert body["model"] == "qwen3:14b" and body["stream"] is False and body["system"] == "SYS"
    assert '"tool": "fs.write_file"' in body["prompt"] and "/tmp/x" in body["prompt"]


async def test_anthropic_messages_api_is_asked_with_key_version_and_system() -> None:
    with llm_servers.anthropic("DECISION: DENY | CONFIDENCE: 0.97 | REASONING: outside the project") as (url, seen):
        cfg = ProviderConfig(provider="anthropic", model="claude-sonnet-4-6", url=url, api_key="sk-ant-test")
        chain = ProviderChain([cfg], "SYS")
        verdict = await chain.evaluate(CTX)
        await chain.aclose()
    assert verdict == Verdict("deny", 0.97, "[anthropic] outside the project", "anthropic")
    body = json.loads(seen[0]["body"])
    assert body["system"] == "SYS" and body["messages"][0]["role"] == "user"
    assert seen[0]["headers"]["anthropic-version"] == "2023-06-01"


async def test_openai_compatible_chat_completions_with_a_v1_base_url() -> None:
    with llm_servers.openai("DECISION: ESCALATE | CONFIDENCE: 0.6 | REASONING: unusual") as (url, seen):
        cfg = ProviderConfig(provider="openai", model="gpt-4o-mini", url=url + "/v1", api_key="sk-test")
        chain = ProviderChain([cfg], "SYS")
        verdict = await chain.evaluate(CTX)
        await chain.aclose()
    assert verdict is not None and verdict.action == "escalate"
    body = json.loads(seen[0]["body"])
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_a_rejected_key_is_a_failure(kind: str) -> None:
    server = getattr(llm_servers, kind)
    with server(APPROVE) as (url, _):
        chain = ProviderChain([ProviderConfig(provider=kind, model="m", url=url, api_key="wrong")], "SYS")
        assert await chain.evaluate(CTX) is None
        assert chain.status()[0]["state"] == "failing" and "401" in chain.status()[0]["detail"]
        await chain.aclose()


async def test_an_http_error_an_unreadable_reply_or_no_server_are_failures() -> None:
    with llm_servers.ollama(APPROVE, status=500) as (url, _):
        chain = ProviderChain([ProviderConfig(provider="ollama", url=url)], "SYS")
        assert await chain.evaluate(CTX) is None
    with llm_servers.ollama("Sure, looks fine to me!") as (url, _):
        chain = ProviderChain([ProviderConfig(provider="ollama", url=url)], "SYS")
        assert await chain.evaluate(CTX) is None
        assert chain.status()[0]["detail"] == "unreadable reply"
    chain = ProviderChain([ProviderConfig(provider="ollama", url=f"http://127.0.0.1:{free_port()}", timeout=2)], "S")
    assert await chain.evaluate(CTX) is None


async def test_the_chain_falls_through_to_the_next_provider_and_skips_a_dead_one() -> None:
    now = [1000.0]
    dead = f"http://127.0.0.1:{free_port()}"
    with llm_servers.openai(APPROVE) as (url, seen):
        chain = ProviderChain(
            [
                ProviderConfig(provider="ollama", url=dead, timeout=2),
                ProviderConfig(provider="openai", model="m", url=url, api_key="sk-test"),
            ],
            "SYS",
            failures=2,
            cooldown=60,
            clock=lambda: now[0],
        )
        assert chain.mode == "chain"
        first = await chain.evaluate(CTX)
        assert first is not None and first.reasoning.startswith("[openai, ollama failed] ")
        await chain.evaluate(CTX)
        states = chain.status()
        assert states[0]["state"] == "skipped" and states[0]["skipped_for_s"] == 60
        third = await chain.evaluate(CTX)
        assert third is not None and third.reasoning.startswith("[openai, ollama skipped] ")
        now[0] += 61
        assert chain.status()[0]["state"] == "ok"
        assert len(seen) == 3
        await chain.aclose()
