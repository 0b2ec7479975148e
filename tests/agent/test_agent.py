"""The agent loop end to end in process: a streaming model on loopback, the real mesh, the pets backend."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.agent.agent import Agent, Workspace
from flux7.shared.agent.context import SUMMARY_PROMPT, ContextEngine
from flux7.shared.agent.events import AgentEvent
from flux7.shared.agent.llm import make_chat
from flux7.shared.agent.mesh_tools import MeshTools
from tests.agent.conftest import POLICY, InProcessMesh, in_process_mesh, write_mesh_config
from tests.agent.llm_stream_servers import anthropic_stream, last_tool_results, openai_stream
from tests.support.mesh import pets_mesh_config
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend

Steps = list[tuple[str, ...]]


def call_then_report(tool: str, arguments: dict[str, Any]) -> Any:
    """A model that calls `tool` once, then answers with what the tool result said."""

    def script(body: dict[str, Any]) -> Steps:
        results = last_tool_results(body)
        if not results:
            return [("text", f"Calling {tool}."), ("tool", tool, json.dumps(arguments))]
        return [("text", f"The tool said: {results[0]}")]

    return script


async def run(agent: Agent, prompt: str) -> list[AgentEvent]:
    return [event async for event in agent.run(prompt)]


def in_background(agent: Agent, prompt: str) -> tuple[asyncio.Task[None], list[AgentEvent]]:
    """The run as a task, and the list its events arrive in while it runs."""
    events: list[AgentEvent] = []

    async def drive() -> None:
        async for event in agent.run(prompt):
            events.append(event)

    return asyncio.create_task(drive()), events


def agent_for(world: InProcessMesh, provider: str, url: str, **kw: Any) -> Agent:
    key = "sk-test" if provider == "openai" else "sk-ant-test"
    chat = make_chat(provider, "m", url=url, api_key=key, backoff=0)
    return Agent(chat, world.tools(agent_id="coder", session_id="sess-7"), **kw)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_tool_call_goes_through_the_mesh_and_its_result_back_to_the_model(
    tmp_path: Path, backend: Backend, provider: str
) -> None:
    serve = openai_stream if provider == "openai" else anthropic_stream
    with serve(call_then_report("list_pets", {"limit": 2})) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            agent = agent_for(world, provider, llm.url)
            events = await run(agent, "Which pets are there?")
            traces = (await world.admin.get("/sessions/sess-7")).json()
    kinds = [e.type for e in events]
    assert kinds[0] == "agent_start" and kinds[-2:] == ["text_complete", "agent_end"]
    assert kinds.index("tool_call_start") < kinds.index("tool_call_complete")
    done = next(e for e in events if e.type == "tool_call_complete")
    assert (done.tool, done.arguments, done.policy, done.is_error) == ("list_pets", {"limit": 2}, "allow", False)
    assert "Rex" in done.text and "Tom" in done.text
    final = next(e for e in events if e.type == "text_complete").text
    assert final.startswith("The tool said:") and "Rex" in final  # the model read the mesh's result
    assert [(t["agent_id"], t["tool"], t["policy"], t["trace_id"]) for t in traces] == [
        ("coder", "list_pets", "allow", done.trace_id)
    ]
    assert events[-1].usage == {"input_tokens": 24, "output_tokens": 14}  # two model turns
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool", "assistant"]


async def test_a_tool_whose_name_no_model_accepts_is_offered_renamed_and_called_by_its_own_name(
    tmp_path: Path, backend: Backend
) -> None:
    with openai_stream(call_then_report("clock_run", {"args": ["-u"]})) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            events = await run(agent_for(world, "openai", llm.url), "What time is it?")
    offered = [t["function"]["name"] for t in llm.bodies[0]["tools"]]
    assert "clock_run" in offered and all("." not in name for name in offered)
    done = next(e for e in events if e.type == "tool_call_complete")
    assert (done.tool, done.policy, done.is_error) == ("clock.run", "allow", False), done.text
    assert "UTC" in done.text


async def test_a_denied_call_reaches_the_model_as_a_refusal_and_runs_nothing(tmp_path: Path, backend: Backend) -> None:
    with openai_stream(call_then_report("delete_pet", {"petId": "1"})) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            before = len(backend.requests)
            events = await run(agent_for(world, "openai", llm.url), "Delete Rex")
            assert len(backend.requests) == before
    done = next(e for e in events if e.type == "tool_call_complete")
    assert (done.policy, done.is_error) == ("deny", True) and done.trace_id
    assert llm.bodies[-1]["messages"][-1]["content"].startswith("refused by policy:")
    assert events[-1].type == "agent_end"


async def test_a_call_held_for_approval_runs_once_a_human_approves(tmp_path: Path, backend: Backend) -> None:
    with openai_stream(call_then_report("create_pet", {"name": "Kit"})) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            agent = agent_for(world, "openai", llm.url, wait_notice=0.05)
            running, events = in_background(agent, "Add a pet called Kit")
            # The agent says the call waits; with an admin token set it cannot see which approval.
            waiting = await eventually(lambda: [e for e in events if e.type == "tool_call_waiting"], timeout=15)
            assert [w.approval_id for w in waiting] == [""]
            held = (await world.admin.get("/approvals", params={"status": "pending"})).json()
            assert [(a["agent_id"], a["tool"]) for a in held] == [("coder", "create_pet")]
            assert not any(r.method == "POST" for r in backend.requests)  # nothing ran while it waited
            approved = await world.admin.post(f"/approvals/{held[0]['id']}/approve", json={"resolved_by": "ops"})
            assert approved.status_code == 200
            await asyncio.wait_for(running, 15)
    done = next(e for e in events if e.type == "tool_call_complete")
    assert (done.policy, done.approval_id, done.is_error) == ("human_approval", held[0]["id"], False)
    assert [r.body for r in backend.requests if r.method == "POST"] == [{"name": "Kit"}]
    assert events[-1].type == "agent_end"


async def test_a_call_that_waits_says_so_and_names_the_approval_when_the_mesh_shows_it(
    tmp_path: Path, backend: Backend
) -> None:
    # No admin token: the control plane is open to loopback callers, this agent included.
    config = pets_mesh_config(tmp_path, backend, POLICY, admin_token=None)
    with openai_stream(call_then_report("create_pet", {"name": "Kit"})) as llm:
        async with in_process_mesh(config) as world:
            agent = agent_for(world, "openai", llm.url, wait_notice=0.05)
            running, seen = in_background(agent, "Add Kit")
            waiting = await eventually(lambda: [e for e in seen if e.type == "tool_call_waiting"], timeout=15)
            held = (await world.admin.get("/approvals", params={"status": "pending"})).json()
            assert waiting[0].approval_id == held[0]["id"] and waiting[0].tool == "create_pet"
            await world.admin.post(f"/approvals/{held[0]['id']}/deny", json={"resolved_by": "ops"})
            await asyncio.wait_for(running, 15)
    done = next(e for e in seen if e.type == "tool_call_complete")
    assert (done.policy, done.is_error) == ("human_approval", True)
    assert done.text == "refused: approval denied by ops. Do not retry this call; tell the user."


async def test_made_up_tools_and_bad_arguments_are_answered_without_calling_anything(
    tmp_path: Path, backend: Backend
) -> None:
    def script(body: dict[str, Any]) -> Steps:
        if not last_tool_results(body):
            return [("tool", "rm_rf_everything", "{}"), ("tool", "list_pets", "not json")]
        return [("text", "done")]

    with openai_stream(script) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            before = len(backend.requests)
            events = await run(agent_for(world, "openai", llm.url), "go")
            traces = (await world.admin.get("/traces")).json()
    assert len(backend.requests) == before and traces == []
    results = [e.text for e in events if e.type == "tool_call_complete"]
    assert results == [
        "error: there is no tool named 'rm_rf_everything'",
        "error: the arguments must be a JSON object; nothing was called",
    ]
    assert last_tool_results(llm.bodies[-1]) == results


async def test_a_model_that_never_stops_calling_tools_is_stopped(tmp_path: Path, backend: Backend) -> None:
    def script(body: dict[str, Any]) -> Steps:  # a new call each turn: no loop, just no end
        return [("tool", "list_pets", json.dumps({"limit": len(body["messages"])}))]

    with openai_stream(script) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            agent = agent_for(world, "openai", llm.url, max_turns=3)
            events = await run(agent, "loop forever")
    assert events[-1].type == "agent_error" and events[-1].text == "stopped after 3 model turns"
    assert len(llm.bodies) == 3
    assert agent.messages[-1].role == "assistant"  # the next prompt follows a well-formed conversation


async def test_a_failing_model_leaves_the_conversation_as_it_was(tmp_path: Path, backend: Backend) -> None:
    with openai_stream(lambda _b: [("text", "hello")]) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            agent = agent_for(world, "openai", llm.url)
            assert (await run(agent, "first"))[-1].type == "agent_end"
            llm.fail += [401]
            failed = await run(agent, "second")
            assert failed[-1].type == "agent_error" and "HTTP 401" in failed[-1].text
            assert [m.text for m in agent.messages] == ["first", "hello"]
            assert (await run(agent, "third"))[-1].type == "agent_end"
    assert [m["content"] for m in llm.bodies[-1]["messages"][1:]] == ["first", "hello", "third"]


async def test_a_mesh_that_does_not_answer_stops_the_run_before_the_model_is_asked() -> None:
    with openai_stream(lambda _b: [("text", "hello")]) as llm:
        agent = Agent(make_chat("openai", "m", url=llm.url, api_key="sk-test"), MeshTools("http://127.0.0.1:9", "x"))
        events = await run(agent, "hi")
    assert events[-1].type == "agent_error" and events[-1].text.startswith("cannot list the mesh's tools")
    assert llm.bodies == []


async def test_the_same_call_asked_for_again_and_again_stops_the_run_and_says_why(
    tmp_path: Path, backend: Backend
) -> None:
    with openai_stream(lambda _b: [("text", "Checking."), ("tool", "list_pets", '{"limit": 2}')]) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            agent = agent_for(world, "openai", llm.url, max_turns=10)
            events = await run(agent, "loop")
            traces = (await world.admin.get("/sessions/sess-7")).json()
    assert events[-1].type == "agent_error"
    assert events[-1].text == (
        'stopped: loop detected: the model asked for list_pets with the same arguments 3 times in a row ({"limit": 2})'
    )
    assert len(llm.bodies) == 3 and len(traces) == 2  # the third call was not made
    assert [m.role for m in agent.messages][-3:] == ["assistant", "tool", "assistant"]  # well formed for what's next


async def test_the_same_text_written_again_and_again_stops_the_run(tmp_path: Path, backend: Backend) -> None:
    def script(body: dict[str, Any]) -> Steps:
        text = "Let me think about the pets again."
        return [("text", text), ("tool", "list_pets", json.dumps({"limit": len(body["messages"])}))]

    with openai_stream(script) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            events = await run(agent_for(world, "openai", llm.url, max_turns=10), "think")
    assert events[-1].text == (
        "stopped: loop detected: the model wrote the same text 3 times in a row ('Let me think about the pets again.')"
    )
    assert len(llm.bodies) == 3


async def test_a_full_context_is_compacted_by_a_summary_and_the_task_finishes_after_it(
    tmp_path: Path, backend: Backend
) -> None:
    def script(body: dict[str, Any]) -> Steps:
        messages = body["messages"]
        if messages[0]["content"] == SUMMARY_PROMPT:
            assert "list_pets" in messages[1]["content"] and "Rex" in messages[1]["content"]  # the transcript
            return [("text", "SUMMARY: the user asked which pets there are; list_pets answered Rex and Tom.")]
        if last_tool_results(body):
            return [("text", "Done: " + last_tool_results(body)[0][:40])]
        return [("tool", "list_pets", json.dumps({"limit": len(messages)}))]

    with openai_stream(script) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            # A window so small that every turn is over it: the first prompt has nothing before it to compact, the
            # second's first turn compacts the first exchange, its second turn has only the summary before it.
            agent = agent_for(world, "openai", llm.url, context=ContextEngine(window=1000, compact_at=0.1))
            first = await run(agent, "Which pets are there?")
            second = await run(agent, "And again, with one fewer?")
            traces = (await world.admin.get("/sessions/sess-7")).json()
    assert first[-1].type == "agent_end" and not any(e.type == "notice" for e in first)
    notices = [e.text for e in second if e.type == "notice"]
    assert len(notices) == 1 and notices[0].startswith("context compacted: summarized 4 messages (~")
    assert second[-1].type == "agent_end"  # the task finished after the compaction
    summary_requests = [b for b in llm.bodies if b["messages"][0]["content"] == SUMMARY_PROMPT]
    assert len(summary_requests) == 1 and "tools" not in summary_requests[0]
    after = llm.bodies[llm.bodies.index(summary_requests[0]) + 1]["messages"]
    assert [m["role"] for m in after] == ["system", "user", "assistant", "user"]
    assert after[1]["content"].endswith("list_pets answered Rex and Tom.")
    assert after[3]["content"] == "And again, with one fewer?"
    assert [m.role for m in agent.messages] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert [(t["tool"], t["params"]) for t in sorted(traces, key=lambda t: t["timestamp"])] == [
        ("list_pets", {"limit": 2}),
        ("list_pets", {"limit": 4}),
    ]


async def test_read_only_mode_lets_mesh_reads_through_and_refuses_the_rest_locally(
    tmp_path: Path, backend: Backend
) -> None:
    def script(body: dict[str, Any]) -> Steps:
        done = len([m for m in body["messages"] if m["role"] == "tool"])
        if done == 0:
            return [("tool", "list_pets", '{"limit": 1}')]
        if done == 1:
            return [("tool", "create_pet", '{"name": "Kit"}')]
        return [("text", "done")]

    with openai_stream(script) as llm:
        async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
            workspace = Workspace(tmp_path, tmp_path, mode="read-only")
            events = await run(agent_for(world, "openai", llm.url, workspace=workspace), "go")
            traces = (await world.admin.get("/sessions/sess-7")).json()
    done = [(e.tool, e.policy, e.gate) for e in events if e.type == "tool_call_complete"]
    assert done == [("list_pets", "allow", "mesh"), ("create_pet", "refused", "local")]
    refused = last_tool_results(llm.bodies[2])[0]
    assert refused.startswith("refused: create_pet is not a read (write, as the mesh classifies it)")
    assert [(t["tool"], t["policy"]) for t in traces] == [("list_pets", "allow")]  # the refusal left no trace
    assert not any(r.method == "POST" for r in backend.requests)
