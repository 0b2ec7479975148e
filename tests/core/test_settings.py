from __future__ import annotations

from pathlib import Path

import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.settings import choose_config, load_settings, user_data_dir

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


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_stop_without_a_bound_is_a_load_error(tmp_path: Path, value: str) -> None:
    # granian reads 0 as "wait for every request however long": a held call would keep the server up
    assert load_settings(None, env={}).stop_timeout_seconds == 10
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, f"stop_timeout_seconds: {value}\n"), env={})
    assert e.value.key == "stop_timeout_seconds"
    assert ">= 1" in e.value.fault


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


OTEL_ENV = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
    "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Basic%20abc,X-Tenant=env",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "X-Tenant=traces",
    "OTEL_SERVICE_NAME": "mesh-env",
    "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=env",
    "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/ca.pem",
}


def test_otel_variables_configure_the_exporter_when_the_file_does_not() -> None:
    s = load_settings(None, env=OTEL_ENV)
    assert (s.otel_endpoint, s.otel_traces_endpoint, s.otel_protocol) == ("http://collector:4318", "", "http/json")
    assert s.otel_headers == {"Authorization": "Basic abc", "X-Tenant": "traces"}  # the traces variable wins
    assert (s.otel_service_name, s.otel_ca_cert) == ("mesh-env", "/etc/ca.pem")
    assert s.otel_resource_attributes == {"deployment.environment": "prod", "team": "env"}
    assert not s.otel_disabled
    traces = load_settings(None, env={**OTEL_ENV, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/v1/t"})
    assert (traces.otel_endpoint, traces.otel_traces_endpoint) == ("", "https://c/v1/t")
    assert load_settings(None, env={"OTEL_SDK_DISABLED": "TRUE"}).otel_disabled
    assert not load_settings(None, env={"OTEL_SDK_DISABLED": "no"}).otel_disabled  # only "true" disables
    assert load_settings(None, env={**OTEL_ENV, "OTEL_TRACES_EXPORTER": "none"}).otel_disabled
    console = load_settings(None, env={"OTEL_TRACES_EXPORTER": "console"})
    assert (console.otel_endpoint, console.otel_disabled) == ("stdout", False)
    defaults = load_settings(None, env={})
    assert (defaults.otel_protocol, defaults.otel_service_name, defaults.otel_endpoint) == ("http/protobuf", "", "")


def test_the_config_file_wins_over_otel_variables(tmp_path: Path) -> None:
    cfg = write(
        tmp_path,
        "otel_endpoint: stdout\notel_protocol: http/protobuf\notel_service_name: mesh-file\n"
        "otel_headers: {X-Tenant: file}\notel_resource_attributes: {team: file}\notel_disabled: false\n",
    )
    s = load_settings(
        cfg, env={**OTEL_ENV, "OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"}
    )
    assert (s.otel_endpoint, s.otel_traces_endpoint, s.otel_protocol) == ("stdout", "", "http/protobuf")
    assert s.otel_service_name == "mesh-file" and not s.otel_disabled
    assert s.otel_headers == {"Authorization": "Basic abc", "X-Tenant": "file"}  # merged; the file wins per key
    assert s.otel_resource_attributes == {"deployment.environment": "prod", "team": "file"}


@pytest.mark.parametrize(
    ("env", "key", "fault"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL", "gRPC is not supported"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf or"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT", "an http(s) URL"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "Authorization"}, "OTEL_EXPORTER_OTLP_HEADERS", "key=value pairs"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "=x"}, "OTEL_RESOURCE_ATTRIBUTES", "key=value pairs"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER", "otlp, console or none"),
    ],
)
def test_a_bad_otel_variable_stops_the_start_naming_it(env: dict[str, str], key: str, fault: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(None, env=env)
    assert (e.value.file, e.value.key) == ("(environment)", key) and fault in e.value.fault


def test_bad_otel_keys_in_the_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "otel_protocol: grpc\n"), env={})
    assert e.value.key == "otel_protocol"
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "otel_traces_endpoint: collector/v1/traces\n"), env={})
    assert e.value.key == "otel_traces_endpoint"


def test_without_a_config_the_state_goes_to_the_per_user_data_directory_never_the_current_folder(
    tmp_path: Path,
) -> None:
    home = {"HOME": str(tmp_path / "home")}
    s = load_settings(None, env=home)
    assert s.resolve_path(s.storage_path) == tmp_path / "home" / ".local" / "share" / "flux7" / "flux7.db"
    assert user_data_dir({**home, "XDG_DATA_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "flux7"
    assert user_data_dir({**home, "XDG_DATA_HOME": "relative/dir"}) == tmp_path / "home" / ".local/share/flux7"
    named = load_settings(None, env=home, storage_path=str(tmp_path / "here.db"))  # an override still wins
    assert named.resolve_path(named.storage_path) == tmp_path / "here.db"
    cfg = write(tmp_path, "port: 9091\n")  # a config file without storage_path: beside the file, as before
    assert load_settings(cfg, env=home).resolve_path("flux7.db") == tmp_path / "flux7.db"


def test_the_example_config_keeps_its_state_out_of_the_checkout(tmp_path: Path) -> None:
    s = load_settings(REPO / "config.example.yaml", env={"HOME": str(tmp_path)})
    data = tmp_path / ".local" / "share" / "flux7"
    assert s.resolve_path(s.storage_path) == data / "flux7.db" and s.resolve_path(s.trace_file).parent == data
    assert s.resolve_path(s.catalog_dir) == REPO / "catalog"
    assert data == user_data_dir({"HOME": str(tmp_path)})  # the built-in defaults' database: the same file


def test_which_config_a_command_uses(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "FLUX7_CONFIG": "/etc/flux7/config.yaml"}
    assert (choose_config("c.yaml", env, tmp_path).path, choose_config("c.yaml", env, tmp_path).source) == (
        "c.yaml",
        "--config",
    )
    assert choose_config(None, env, tmp_path).source == "FLUX7_CONFIG"
    assert choose_config(None, {}, tmp_path).source == "defaults"
    local = write(tmp_path, "port: 9091\n")
    found = choose_config(None, {"HOME": str(tmp_path)}, tmp_path)
    assert (found.path, found.source, found.chosen) == (str(local), "./config.yaml", False)
    defaults = choose_config(None, {"HOME": str(tmp_path)}, tmp_path / "elsewhere")
    assert defaults.path is None and str(tmp_path / ".local/share/flux7") in defaults.why()
    assert "FLUX7_CONFIG" in defaults.why() and "./config.yaml" in defaults.why()


def test_postgresql_with_a_trace_file_is_refused_naming_the_key(tmp_path: Path) -> None:
    cfg = write(tmp_path, "database: postgresql://flux7@db/flux7\ntrace_file: traces.jsonl\n")
    with pytest.raises(ConfigError, match=r"trace_file: not with a PostgreSQL database"):
        load_settings(cfg, env={})
    plain = write(tmp_path, "trace_file: traces.jsonl\n", "sqlite.yaml")
    with pytest.raises(ConfigError, match="trace_file"):  # FLUX7_DATABASE_URL makes it PostgreSQL too
        load_settings(plain, env={"FLUX7_DATABASE_URL": "postgresql://flux7@db/flux7"})
    assert load_settings(plain, env={}).trace_file == "traces.jsonl"


def test_oauth_redirect_schemes_name_apps_never_what_a_browser_runs(tmp_path: Path) -> None:
    assert load_settings(None, env={}).oauth.redirect_schemes == ("cursor",)
    chosen = load_settings(write(tmp_path, "oauth: {redirect_schemes: [cursor, vscode, com.example.app]}\n"), env={})
    assert chosen.oauth.redirect_schemes == ("cursor", "vscode", "com.example.app")
    for bad, why in (
        ("javascript", "handled by the browser"),
        ("https", "handled by the browser"),
        ("Cur_sor", "lower-case"),
    ):
        with pytest.raises(ConfigError) as e:
            load_settings(write(tmp_path, f"oauth: {{redirect_schemes: [cursor, {bad}]}}\n"), env={})
        assert e.value.key == "oauth.redirect_schemes[1]" and why in e.value.fault, e.value


def test_client_metadata_documents_are_on_with_the_public_internet_only(tmp_path: Path) -> None:
    default = load_settings(None, env={}).oauth
    assert default.client_metadata_documents and default.client_metadata_networks == ()
    ca = tmp_path / "ca.pem"
    ca.write_text("-")
    cfg = f"oauth: {{client_metadata_networks: [10.0.0.0/8, 'fd00::/8'], client_metadata_ca_file: '{ca}'}}\n"
    chosen = load_settings(write(tmp_path, cfg), env={}).oauth
    assert chosen.client_metadata_networks == ("10.0.0.0/8", "fd00::/8") and chosen.client_metadata_ca_file == str(ca)
    for bad, key, why in (
        ("{client_metadata_networks: [intranet]}", "oauth.client_metadata_networks[0]", "a network such as"),
        ("{client_metadata_ca_file: /nowhere/ca.pem}", "oauth.client_metadata_ca_file", "no such file"),
    ):
        with pytest.raises(ConfigError) as e:
            load_settings(write(tmp_path, f"oauth: {bad}\n"), env={})
        assert e.value.key == key and why in e.value.fault, e.value


def test_registrations_are_limited_per_address_by_default_and_a_negative_limit_is_refused(tmp_path: Path) -> None:
    assert load_settings(None, env={}).oauth.registrations_per_minute == 20
    assert (
        load_settings(write(tmp_path, "oauth: {registrations_per_minute: 0}\n"), env={}).oauth.registrations_per_minute
        == 0
    )
    with pytest.raises(ConfigError) as e:
        load_settings(write(tmp_path, "oauth: {registrations_per_minute: -1}\n"), env={})
    assert e.value.key == "oauth.registrations_per_minute" and "0 (no limit)" in e.value.fault, e.value
