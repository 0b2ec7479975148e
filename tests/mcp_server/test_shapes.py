"""The two tools/call result shapes on the wire (in process, raw JSON-RPC): faithful (the default) passes an MCP
upstream's result on byte for byte and gives OpenAPI and CLI tools a text block plus structuredContent under a
declared output schema; `mcp.result_shape: reference` brings back the reference's shape."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.gate.pipeline import Outcome
from flux7.shared.mcp import texts
from flux7.shared.mcp.shapes import outcome_result
from flux7.shared.settings import load_settings
from tests.mcp_server.inproc import Rpc, mesh_client
from tests.support.mesh import pets_mesh_config
from tests.upstreams.servers.http_backend import Backend
from tests.upstreams.servers.mcp_rich import weather_result

RICH = Path(__file__).resolve().parents[1] / "upstreams" / "servers" / "mcp_rich.py"


def rich_config(tmp: Path, extra: str = "") -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(f"""
storage_path: {tmp}/flux7.db
approval: {{timeout_seconds: 60, channel: queue}}
memory: {{enabled: false}}
mcp_servers:
  - {{name: rich, transport: stdio, command: {sys.executable}, args: ['{RICH}']}}
cli_tools:
  - {{name: say, bin: /bin/echo, bare: {{timeout: 5s}}}}
  - {{name: mute, bin: /bin/echo, bare: {{timeout: 5s}}}}
policies:
  - name: claude
    agent: claude
    rules:
      - {{tools: ["rich.weather", "rich.wipe", "say.run"], action: allow}}
      - {{tools: ["rich.plain"], action: human_approval}}
      - {{tools: ["mute.run"], action: deny}}
{extra}""")
    return cfg


@pytest.mark.served
async def test_faithful_results_are_the_upstreams_bytes_in_both_eras(tmp_path: Path) -> None:
    async with mesh_client(rich_config(tmp_path)) as client:
        rest = await client.post("/tool/rich.weather", json={"params": {"city": "Oslo"}}, headers=_agent())
        session = await (await Rpc(client).open()).call("rich.weather", {"city": "Oslo"})
        stateless = await (await Rpc(client, modern=True).open()).call("rich.weather", {"city": "Oslo"})
        wiped = await (await Rpc(client).open()).call("rich.wipe", {"target": "/srv"})
    assert rest.json()["result"] == weather_result("Oslo")  # REST keeps its contract: the raw upstream object
    assert session == weather_result("Oslo")
    assert stateless == {**weather_result("Oslo"), "resultType": "complete"}
    assert wiped == {"content": [{"type": "text", "text": "refused: /srv is mounted read-only"}], "isError": True}


@pytest.mark.served
async def test_reference_shape_wraps_results_twice_and_denies_without_is_error(tmp_path: Path) -> None:
    config = rich_config(tmp_path, "mcp: {result_shape: reference}\n")
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        listed = (await rpc.post("tools/list")).json()["result"]["tools"]
        weather = await rpc.call("rich.weather", {"city": "Oslo"})
        wiped = await rpc.call("rich.wipe", {"target": "/srv"})
        denied = await rpc.call("mute.run", {})
        held = await rpc.call("rich.plain", {"text": "x"})
        said = await rpc.call("say.run", {"args": ["hi"]})
    assert {frozenset(t) for t in listed} == {frozenset({"name", "description", "inputSchema"})}
    assert weather == {"content": [{"type": "text", "text": texts.go_indent(weather_result("Oslo"))}]}
    assert json.loads(weather["content"][0]["text"])["structuredContent"]["city"] == "Oslo"
    assert "isError" not in wiped and json.loads(wiped["content"][0]["text"])["isError"] is True
    assert denied == {"content": [{"type": "text", "text": "Policy denied: policy=claude tool=mute.run action=deny"}]}
    assert "isError" not in held and held["content"][0]["text"].startswith("Approval required (id: ")
    assert "structuredContent" not in said and json.loads(said["content"][0]["text"])["stdout"] == "hi\n"


@pytest.mark.served
async def test_faithful_denial_is_an_error_with_the_same_words(tmp_path: Path) -> None:
    async with mesh_client(rich_config(tmp_path)) as client:
        rpc = await Rpc(client).open()
        denied = await rpc.call("mute.run", {})
        listed = {t["name"]: t for t in (await rpc.post("tools/list")).json()["result"]["tools"]}
    assert denied == {
        "content": [{"type": "text", "text": "Policy denied: policy=claude tool=mute.run action=deny"}],
        "isError": True,
    }
    assert listed["rich.weather"]["title"] == "Current weather" and "outputSchema" in listed["rich.weather"]
    assert listed["say.run"]["outputSchema"]["required"] == ["stdout", "stderr", "exit_code"]
    assert "outputSchema" not in listed["grant.list"]


def test_an_unknown_result_shape_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("mcp: {result_shape: pretty}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert str(err.value).endswith("mcp.result_shape: Invalid enum value 'pretty'")


# -- OpenAPI tools: structuredContent under the success response's declared object schema ---------------------

PETS_POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["*"]
    action: allow
"""


async def test_openapi_tools_answer_text_and_structured_content_under_their_response_schema(
    tmp_path: Path, backend: Backend
) -> None:
    async with mesh_client(pets_mesh_config(tmp_path, backend, PETS_POLICY, admin_token=None)) as client:
        rpc = await Rpc(client).open()
        listed = {t["name"]: t for t in (await rpc.post("tools/list")).json()["result"]["tools"]}
        pet = await rpc.call("get_pet_by_id", {"petId": "1"})
        plain = await rpc.call("get_text")
        lying = await rpc.call("delete_pet", {"petId": "2"})
        boom = await rpc.call("get_boom")
    schema = listed["get_pet_by_id"]["outputSchema"]
    assert schema["properties"]["tag"] == {"type": ["string", "null"]}  # OpenAPI 3.0 nullable, as JSON Schema
    assert listed["list_pets"]["outputSchema"]["properties"]["pets"]["items"] == schema  # $refs inlined
    assert "outputSchema" not in listed["get_text"] and "outputSchema" not in listed["create_pet"]
    assert pet == {
        "content": [{"type": "text", "text": '{\n  "id": 1,\n  "name": "Rex"\n}'}],
        "structuredContent": {"id": 1, "name": "Rex"},
    }
    assert plain == {"content": [{"type": "text", "text": "hello, plain text"}]}  # text, not a JSON string
    assert lying == {
        "content": [
            {
                "type": "text",
                "text": "Backend error: the result does not match the tool's output schema: "
                "2 is not of type 'string' (at /deleted)",
            }
        ],
        "isError": True,
    }
    assert boom == {"content": [{"type": "text", "text": "Backend error: backend returned HTTP 500"}], "isError": True}


# -- every refusal's shape, including the ones a process test cannot reach quickly (an approval timeout) ------


def _outcome(**kw: Any) -> Outcome:
    return Outcome(status=kw.pop("status", 200), policy=kw.pop("policy", "allow"), trace_id="t" * 32, **kw)


REFUSALS = [
    (_outcome(policy="deny", reason="r"), "Policy denied: r", False),
    (_outcome(policy="rate_limited", error="e"), "Rate limited: e", True),
    (_outcome(policy="halted", halted=True, halt_message="halted: x"), "halted: x", True),
    (_outcome(policy="allow", error="upstream down"), "Backend error: upstream down", True),
    (
        _outcome(policy="human_approval", approval_id="ab" * 8, approval_status="timeout"),
        "Approval timed out for t.x (id: abababab): nobody approved it in time.",
        True,
    ),
    (
        _outcome(policy="human_approval", approval_id="ab" * 8, approval_status="denied", resolved_by="bob"),
        "Approval denied by bob for t.x (id: abababab): do not retry this call.",
        True,
    ),
]


@pytest.mark.parametrize(("outcome", "text", "reference_error"), REFUSALS)
def test_refusals_keep_their_text_and_are_errors_when_faithful(
    outcome: Outcome, text: str, reference_error: bool
) -> None:
    faithful = outcome_result(outcome, None, "t.x", lambda: 60)
    reference = outcome_result(outcome, None, "t.x", lambda: 60, "reference")
    assert faithful == {"content": [{"type": "text", "text": text}], "isError": True}
    assert reference["content"] == faithful["content"]
    assert reference.get("isError", False) is reference_error


def _agent() -> dict[str, str]:
    return {"Authorization": "Bearer agent:claude"}
