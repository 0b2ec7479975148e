from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import ConfigError
from shared.settings import load_settings

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_example_config_loads_as_is() -> None:
    s = load_settings(REPO / "config.example.yaml", env={})
    assert s.port == 9090
    assert {p.name for p in s.policies} >= {"default", "claude"}
    assert all(p.source_file for p in s.policies)


def test_defaults_follow_the_contract() -> None:
    s = load_settings(None, env={})
    assert (s.port, s.approval.timeout_seconds, s.approval.channel) == (9090, 300, "tty-fallback")
    assert (s.supervisor.min_approvals, s.supervisor.expose_content, s.supervisor.auto_approve_writes) == (
        3,
        True,
        False,
    )


def test_unknown_key_names_file_key_and_fault(tmp_path: Path) -> None:
    cfg = write(tmp_path, "approval:\n  timeout_secs: 5\n")
    with pytest.raises(ConfigError) as e:
        load_settings(cfg, env={})
    assert e.value.file == str(cfg.resolve())
    assert e.value.key == "approval"
    assert "timeout_secs" in e.value.fault


def test_wrong_type_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "port: nine\n"), env={})
    assert e.value.key == "port"


def test_bad_channel_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "approval: {channel: slack}\n"), env={})
    assert e.value.key == "approval.channel"


def test_env_expansion_and_overrides(tmp_path: Path) -> None:
    cfg = write(
        tmp_path,
        "memory: {url: 'http://m', token: '${MEMTOK}'}\notel_headers: {x-api-key: '${OTK}'}\n",
    )
    s = load_settings(cfg, env={"MEMTOK": "s3cret", "OTK": "k", "MESH_ADMIN_TOKEN": "adm", "MESH_TRACE_KEY": "tk"})
    assert s.memory.token == "s3cret"
    assert s.otel_headers == {"x-api-key": "k"}
    assert s.auth.admin_token == "adm"
    assert s.trace_key == "tk"


def test_policy_dir_is_relative_to_the_config_and_duplicates_fail(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "a.yaml").write_text("name: a\nagent: '*'\nrules: [{tools: ['*'], action: allow}]\n")
    cfg = write(tmp_path, "policy_dir: pol\n")
    s = load_settings(cfg, env={})
    assert [p.name for p in s.policies] == ["a"]
    (tmp_path / "pol" / "b.yaml").write_text("name: a\nrules: []\n")
    with pytest.raises(ConfigError) as e:
        load_settings(cfg, env={})
    assert "duplicate" in e.value.fault


def test_policy_file_without_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "x.yaml").write_text("agent: '*'\n")
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "policy_dir: pol\n"), env={})
    assert e.value.file.endswith("x.yaml") and e.value.key == "name"


def test_cli_tool_rules(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="strict needs at least one command"):
        load_settings(write(tmp_path, "cli_tools: [{name: g, bin: git, strict: true}]\n"), env={})
    with pytest.raises(ConfigError, match="invalid duration"):
        load_settings(write(tmp_path, "cli_tools: [{name: g, bin: git, commands: {s: {timeout: soon}}}]\n"), env={})


def test_openapi_needs_exactly_one_of_url_and_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        load_settings(write(tmp_path, "openapi: [{url: a, file: b}]\n"), env={})
