from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import yaml

from flux7.shared.errors import ConfigError
from flux7.shared.supervisor.cli import with_environment
from flux7.shared.supervisor.config import Sup7Config, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sup7.yaml"
DOC = Path(__file__).resolve().parents[2] / "docs" / "supervisor.md"

REFERENCE = """
mesh: {url: http://localhost:9090, agent_id: supervisor}
memory: {url: http://localhost:9070, enabled: true, store_decisions: true, recall_on_start: true,
         recall_limit: 20, tags: [supervisor, decision]}
evaluator:
  provider: ollama
  model: qwen3:14b
  url: http://localhost:11434
  timeout: 30
  callback_timeout: 120
  confidence_threshold: 0.8
mcp_server: {enabled: true, transport: stdio, port: 9095}
poll: {interval: 2s, tool_scopes: []}
rules:
  - {name: safe-reads, condition: "tool contains read", action: approve, confidence: 0.95}
  - {name: project-writes, condition: "params.path starts_with project_dir", action: approve, confidence: 0.9}
  - {name: injection-risk, condition: "injection_risk == true", action: escalate, confidence: 1.0}
project_dirs: [/home/fluxart/flux7-mesh]
decision_log: sup7-decisions.jsonl
"""


def test_the_reference_example_loads_with_a_default_escalate_rule_appended() -> None:
    c = parse_config(yaml.safe_load(REFERENCE))
    assert c.poll.interval == 2.0
    assert [r.name for r in c.rules] == ["safe-reads", "project-writes", "injection-risk", "default"]
    default = c.rules[-1]
    assert default.condition is None and default.action == "escalate" and default.confidence == 1.0
    assert c.memory.enabled and c.memory.tags == ("supervisor", "decision")
    assert [p.provider for p in c.evaluator.providers()] == ["ollama"]


def test_the_config_may_be_nested_under_supervisor_and_durations_parse() -> None:
    c = parse_config({"supervisor": {"poll": {"interval": "500ms"}, "mesh": {"agent_id": "l1"}}})
    assert c.poll.interval == 0.5 and c.mesh.agent_id == "l1"
    assert parse_config({"poll": {"interval": 3}}).poll.interval == 3.0


def test_an_explicit_catch_all_is_not_doubled() -> None:
    c = parse_config({"rules": [{"name": "everything", "action": "escalate"}]})
    assert [r.name for r in c.rules] == ["everything"]


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"rules": [{"name": "x", "condition": "tool resembles read"}]}, "rules[0].condition"),
        ({"rules": [{"name": "x", "condition": "equals read"}]}, "rules[0].condition"),
        ({"rules": [{"name": "x", "condition": "tool"}]}, "rules[0].condition"),
        ({"rules": [{"name": "x", "action": "maybe"}]}, "rules[0].action"),
        ({"rules": [{"name": "x"}, {"name": "x"}]}, "rules[1].name"),
        ({"poll": {"interval": "soon"}}, "poll.interval"),
        ({"evaluator": {"provider": "claude-code"}}, "evaluator.provider"),
        ({"evaluator": {"chain": [{"provider": "claude-code"}]}}, "evaluator.chain[0].provider"),
        (
            {
                "evaluator": {"chain": [{"provider": "claude-code"}, {"provider": "claude-code"}]},
                "mcp_server": {"enabled": True},
            },
            "evaluator.chain",
        ),
        ({"evaluator": {"callback_timeout": "soon"}}, "evaluator.callback_timeout"),
        ({"evaluator": {"callback_timeout": 0}}, "evaluator.callback_timeout"),
        ({"evaluator": {"chain": [{"provider": "ollama", "timeout": "later"}]}}, "evaluator.chain[0].timeout"),
        ({"mcp_server": {"enabled": True, "transport": "sse"}}, "mcp_server.transport"),
        ({"mcp_server": {"port": 70000}}, "mcp_server.port"),
        ({"mcp_server": {"enabled": True, "host": "0.0.0.0"}}, "mcp_server.token"),
        ({"evaluator": {"chain": [{"provider": "ollama"}, {"provider": "jev"}]}}, "evaluator.chain[1].provider"),
        ({"evaluator": {"confidence_threshold": 1.5}}, "evaluator.confidence_threshold"),
        ({"admin": {"enabled": True, "host": "0.0.0.0"}}, "admin.token"),
    ],
)
def test_bad_values_are_a_config_error_naming_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(data, "sup7.yaml")
    assert e.value.key == key and e.value.file == "sup7.yaml"


def test_unknown_keys_are_reported_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    c = parse_config({"evaluator": {"jev": {"backend": "cloudflare"}, "wat": 1}, "extra": True})
    assert c.evaluator.provider == "ollama"
    assert "evaluator.wat" in caplog.text and "extra" in caplog.text


def test_claude_code_needs_the_mcp_server_and_takes_durations() -> None:
    c = parse_config(
        {
            "evaluator": {"provider": "claude-code", "callback_timeout": "2m", "timeout": "45s"},
            "mcp_server": {"enabled": True},
        }
    )
    assert [p.provider for p in c.evaluator.providers()] == ["claude-code"]
    assert c.evaluator.callback_timeout == 120.0 and c.evaluator.timeout == 45.0
    m = c.mcp_server
    assert (m.enabled, m.transport, m.host, m.port, m.token) == (True, "http", "127.0.0.1", 9095, "")
    default = parse_config({})
    assert default.mcp_server.enabled is False and default.evaluator.callback_timeout == 120.0
    chained = parse_config(
        {"evaluator": {"chain": [{"provider": "claude-code"}, {"provider": "ollama"}]}, "mcp_server": {"enabled": True}}
    )
    assert [p.provider for p in chained.evaluator.providers()] == ["claude-code", "ollama"]
    beyond = parse_config({"mcp_server": {"enabled": True, "host": "0.0.0.0", "token": "t"}})
    assert beyond.mcp_server.host == "0.0.0.0"


def test_provider_none_turns_the_llm_off() -> None:
    assert parse_config({"evaluator": {"provider": "none"}}).evaluator.providers() == ()


def test_the_environment_fills_tokens_and_keys_only_where_the_file_leaves_them_empty() -> None:
    c = parse_config(
        {
            "memory": {"token": "from-file"},
            "evaluator": {"provider": "anthropic", "chain": [{"provider": "openai"}, {"provider": "ollama"}]},
        }
    )
    env = {"MESH_ADMIN_TOKEN": "adm", "MEM7_TOKEN": "m", "ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"}
    out = with_environment(c, env)
    assert out.mesh.admin_token == "adm" and out.memory.token == "from-file"
    assert out.evaluator.api_key == "a"
    assert [p.api_key for p in out.evaluator.chain] == ["o", ""]


def test_the_shipped_example_loads() -> None:
    c = load_config(EXAMPLE)
    assert c.config_path == str(EXAMPLE) and c.rules[-1].name == "default"


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "nope.yaml")


def _keys(struct: type, prefix: str = "") -> list[str]:
    """Every sup7 config key, dotted; lists of structs (rules, evaluator.chain) are one key each."""
    out: list[str] = []
    for f in msgspec.structs.fields(struct):
        if f.name == "config_path":
            continue
        if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct):
            out.extend(_keys(f.type, f"{prefix}{f.name}."))
        else:
            out.append(prefix + f.name)
    return out


def test_every_sup7_key_is_in_the_docs_table() -> None:
    text = DOC.read_text()
    keys = _keys(Sup7Config)
    assert {"evaluator.callback_timeout", "mcp_server.port", "mcp_server.token", "evaluator.chain"} <= set(keys)
    missing = [k for k in keys if f"| `{k}` |" not in text]
    assert not missing, f"sup7 keys missing from the table in docs/supervisor.md: {missing}"
