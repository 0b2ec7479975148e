"""The agent's view of the mesh: tools listed for the model, calls governed and traced under the agent's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux7.shared.agent.mesh_tools import MeshCredentialRefused, MeshTools, schema_of
from tests.agent.conftest import in_process_mesh, write_mesh_config
from tests.mcp_server.conftest import echo_server
from tests.support.http import serve_json
from tests.support.mesh import pets_mesh_config
from tests.upstreams.servers.http_backend import Backend


def test_schema_of_turns_the_mesh_params_into_a_json_schema() -> None:
    params = [
        {"name": "petId", "in": "path", "type": "string", "required": True},
        {"name": "limit", "in": "query", "type": "integer", "required": False},
        {"name": "odd", "in": "query", "type": "file"},
    ]
    assert schema_of(params) == {
        "type": "object",
        "properties": {
            "petId": {"type": "string", "description": "path parameter"},
            "limit": {"type": "integer", "description": "query parameter"},
            "odd": {"type": "string", "description": "query parameter"},
        },
        "required": ["petId"],
    }


async def test_tools_are_offered_under_provider_safe_unique_names(tmp_path: Path, backend: Backend) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        tools = world.tools()
        listed = await tools.list()
        names = {t.name for t in listed}
        assert {"list_pets", "create_pet", "delete_pet", "get_pet_by_id"} <= names
        renamed = {t.name: t.spec.name for t in listed if t.spec.name != t.name}
        assert renamed == {"clock.run": "clock_run"}  # the others are safe already and kept as they are
        assert tools.mesh_name("clock_run") == "clock.run"
        pet = next(t for t in listed if t.name == "get_pet_by_id")
        assert pet.spec.parameters["required"] == ["petId"]
        assert tools.mesh_name("get_pet_by_id") == "get_pet_by_id"
        assert tools.mesh_name("rm_rf") is None
        await tools.aclose()


async def test_an_allowed_call_returns_the_backend_result_and_is_traced_as_the_agent(
    tmp_path: Path, backend: Backend
) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        tools = world.tools(agent_id="coder", session_id="sess-42")
        await tools.list()
        outcome = await tools.call("list_pets", {"limit": 1})
        await tools.aclose()
        assert not outcome.is_error and outcome.status == 200 and outcome.policy == "allow"
        assert "Rex" in outcome.content
        traces = (await world.admin.get("/traces", params={"trace": outcome.trace_id})).json()
        assert [(t["agent_id"], t["tool"], t["session_id"]) for t in traces] == [("coder", "list_pets", "sess-42")]
        assert (backend.requests[-1].path, backend.requests[-1].query) == ("/pets", {"limit": ["1"]})


async def test_a_denied_call_is_a_refusal_the_model_can_read_and_nothing_reaches_the_backend(
    tmp_path: Path, backend: Backend
) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        tools = world.tools()
        before = len(backend.requests)
        outcome = await tools.call("delete_pet", {"petId": "1"})
        await tools.aclose()
        assert outcome.is_error and outcome.status == 403 and outcome.policy == "deny"
        assert outcome.content.startswith("refused by policy:") and "Do not retry" in outcome.content
        assert outcome.trace_id  # the refusal is traced
        assert len(backend.requests) == before


async def test_an_unknown_tool_and_a_dead_mesh_are_errors_not_crashes(tmp_path: Path, backend: Backend) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        tools = world.tools()
        outcome = await tools.call("no_such_tool", {})
        await tools.aclose()
        assert outcome.is_error and outcome.status == 404 and "unknown tool: no_such_tool" in outcome.content
    dead = MeshTools("http://127.0.0.1:9", "coder")
    outcome = await dead.call("list_pets", {})
    await dead.aclose()
    assert outcome.is_error and outcome.policy == "error" and "did not answer" in outcome.content


async def test_names_that_collide_once_made_safe_stay_distinct() -> None:
    listed = [
        {"name": "github.create_issue", "description": "a", "params": []},
        {"name": "github_create_issue", "description": "b", "params": []},
        {"name": "x" * 80, "description": "long", "params": []},
    ]
    with serve_json(lambda *_: (200, listed)) as (url, _seen):
        tools = MeshTools(url, "coder")
        offered = await tools.list()
        await tools.aclose()
    names = {t.name: t.spec.name for t in offered}
    assert names["github.create_issue"] != names["github_create_issue"]
    assert {tools.mesh_name(n) for n in names.values()} == set(names)
    assert all(len(n) <= 64 for n in names.values())


UPSTREAM_POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["echo.write_file", "delete_pet"]
    action: deny
  - tools: ["*"]
    action: allow
"""


@pytest.mark.served
async def test_schemas_come_verbatim_from_mcp_upstreams_and_hidden_tools_are_not_offered(
    tmp_path: Path, backend: Backend
) -> None:
    extra = f"hide_denied_tools: true\nmcp_servers:\n{echo_server()}\n"
    config = pets_mesh_config(tmp_path, backend, UPSTREAM_POLICY, extra=extra)
    async with in_process_mesh(config) as world:
        tools = world.tools()
        listed = {t.name: t.spec for t in await tools.list()}
        outcome = await tools.call("echo.search", {"query": "q", "tags": ["a", "b"]})
        await tools.aclose()
    search = listed["echo.search"]
    assert search.name == "echo_search"
    assert search.parameters["properties"]["tags"]["anyOf"][0] == {"items": {"type": "string"}, "type": "array"}
    assert search.parameters["required"] == ["query"]
    assert "echo.write_file" not in listed and "delete_pet" not in listed  # hidden from this agent
    assert "echo.echo" in listed and "list_pets" in listed
    assert not any(name.startswith("approval.") for name in listed)  # the MCP-only virtual tools are not tools here
    assert not outcome.is_error and '"tags": ["a", "b"]' in outcome.content


async def test_a_refused_credential_is_told_apart_from_a_policy_s_denial(tmp_path: Path, backend: Backend) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        revoked = MeshTools("http://mesh", "coder", token="f7a_revoked-or-never-issued", transport=world.transport)
        for attempt in (revoked.list(), revoked.decide("list_pets", {}), revoked.call("list_pets", {})):
            with pytest.raises(MeshCredentialRefused, match="HTTP 401: authentication required"):
                await attempt
        await revoked.aclose()
        tools = world.tools()
        denied = await tools.decide("delete_pet", {"petId": "1"})  # a 403 that is a decision, not a refusal
        assert (denied.action, denied.status) == ("deny", 403) and denied.trace_id
        called = await tools.call("delete_pet", {"petId": "1"})
        assert called.is_error and called.content.startswith("refused by policy:")
        await tools.aclose()
