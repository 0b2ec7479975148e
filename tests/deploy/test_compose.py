"""deploy/compose.postgres.yaml, checked without Docker: parsed as YAML, its services (PostgreSQL, three flux7
instances built from the repo's Dockerfile, nginx in front), the environment each instance gets (the same database,
admin token, memory token and signing key on every one), every file it mounts, the nginx upstreams, the
healthchecks; then three real servers started through deploy/entrypoint.sh with exactly that environment and
config (on the test PostgreSQL) behave as one deployment."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dockerfile
import httpx
import pytest
import yaml

from flux7.shared.cli.serve import check_bind
from flux7.shared.settings import load_settings
from tests.support.http import free_port, wait_until

from .support import REPO
from .test_entrypoint import ENTRYPOINT, _env

DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "compose.postgres.yaml"
INSTANCES = ["flux7-1", "flux7-2", "flux7-3"]
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:\?|:-)([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` (an unset required variable is an error)."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return _VAR.sub(one, value)


def example_env() -> dict[str, str]:
    """deploy/compose.postgres.env.example, each change-me replaced as a user would (32+ characters)."""
    out = {}
    for line in (DEPLOY / "compose.postgres.env.example").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            name, value = line.split("=", 1)
            out[name] = f"{name.lower()}-0123456789abcdef0123456789abcdef" if value.startswith("change-me") else value
    return out


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def instance_env(service: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    return {k: interpolate(str(v), env) for k, v in service["environment"].items()}


def image_env() -> dict[str, str]:
    docker = list(dockerfile.parse_file(str(REPO / "Dockerfile")))
    return {c.value[i]: c.value[i + 1] for c in docker if c.cmd == "ENV" for i in range(0, len(c.value), 2)}


def test_the_services_are_postgresql_three_instances_and_a_load_balancer(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert sorted(services) == sorted(["postgres", *INSTANCES, "lb"])
    assert services["postgres"]["image"].startswith("postgres:")  # the official image
    assert services["lb"]["image"].startswith("nginx:")
    for name in INSTANCES:
        build = services[name]["build"]
        context = (DEPLOY / build["context"]).resolve()
        assert context == REPO and (context / build["dockerfile"]).is_file()
        assert services[name]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["lb"]["depends_on"] == {name: {"condition": "service_healthy"} for name in INSTANCES}
    assert compose["volumes"] == {"pgdata": None}
    assert services["postgres"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]


def test_every_instance_gets_the_same_database_and_secrets(compose: dict[str, Any]) -> None:
    env = example_env()
    services = compose["services"]
    envs = [instance_env(services[name], env) for name in INSTANCES]
    assert envs[0] == envs[1] == envs[2]
    got = envs[0]
    assert set(got) == {"FLUX7_DATABASE_URL", "MESH_ADMIN_TOKEN", "MEM7_TOKEN", "FLUX7_DECISIONS_KEY"}
    # the URL names the postgres service, its user, password and database
    url = urlsplit(got["FLUX7_DATABASE_URL"])
    pg = {k: interpolate(str(v), env) for k, v in services["postgres"]["environment"].items()}
    assert url.scheme == "postgresql" and url.hostname == "postgres" and url.port == 5432
    assert (url.username, url.password, url.path) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], "/flux7")
    assert pg["POSTGRES_DB"] == "flux7"
    # every secret is required: a missing one stops `docker compose up` with the variable's name
    for name in ("POSTGRES_PASSWORD", "MESH_ADMIN_TOKEN", "MEM7_TOKEN", "FLUX7_DECISIONS_KEY"):
        with pytest.raises(KeyError, match=name):
            instance_env(services["flux7-1"], {k: v for k, v in env.items() if k != name})
    # and the example env file names every variable the compose file uses
    used = set(_VAR.findall(COMPOSE.read_text()))
    assert {u[0] for u in used} <= set(env) | {"FLUX7_PUBLISH"}


def test_every_mounted_file_exists_and_the_config_lands_where_the_entrypoint_reads_it(compose: dict[str, Any]) -> None:
    data = image_env()["FLUX7_DATA"]
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).is_file(), f"{name} mounts {source}: no such file"
    mounts = compose["services"]["flux7-1"]["volumes"]
    assert mounts == [f"./config.postgres.yaml:{data}/config.yaml:ro"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in compose["services"]["lb"]["volumes"]
    # the entrypoint keeps a config it finds and seeds only what is missing
    assert '[ -f "$DATA/config.yaml" ] ||' in ENTRYPOINT.read_text()


def test_the_config_every_instance_loads_is_postgresql_with_the_shared_secrets(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    env = instance_env(compose["services"]["flux7-1"], example_env())
    shutil.copy(DEPLOY / "config.postgres.yaml", tmp_path / "config.yaml")
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    settings = load_settings(tmp_path / "config.yaml", env=env)
    assert settings.database == env["FLUX7_DATABASE_URL"]
    assert settings.decisions.signing_key == env["FLUX7_DECISIONS_KEY"]
    assert settings.auth.admin_token == env["MESH_ADMIN_TOKEN"] and settings.memory.token == env["MEM7_TOKEN"]
    assert settings.trace_file == ""  # one chain, in the database
    assert settings.port == int(image_env()["FLUX7_PORT"])
    check_bind(settings, "0.0.0.0")


def test_healthchecks_and_the_load_balancer_agree_with_the_instances(compose: dict[str, Any]) -> None:
    services = compose["services"]
    port = image_env()["FLUX7_PORT"]
    for name in INSTANCES:
        test = " ".join(services[name]["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/health" in test
    assert "pg_isready -U flux7 -d flux7" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "/health" in " ".join(services["lb"]["healthcheck"]["test"])
    conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream flux7 \{(.*?)\}", conf, re.S)
    assert upstream is not None
    assert re.findall(r"server ([\w-]+):(\d+)", upstream.group(1)) == [(name, port) for name in INSTANCES]
    listen = re.search(r"listen (\d+);", conf)
    assert listen is not None
    assert services["lb"]["ports"] == [f"${{FLUX7_PUBLISH:-127.0.0.1:8080}}:{listen.group(1)}"]
    # a governed call (a POST) that reached an instance is never replayed on another
    next_upstream = re.search(r"proxy_next_upstream ([^;]*);", conf)
    assert next_upstream is not None and "non_idempotent" not in next_upstream.group(1)
    assert conf.count("{") == conf.count("}")


@contextmanager
def instance(tmp_path: Path, name: str, env: dict[str, str]) -> Iterator[str]:
    """One compose instance as its container runs it: the entrypoint, the mounted config, the compose env."""
    volume = tmp_path / name
    volume.mkdir()
    shutil.copy(DEPLOY / "config.postgres.yaml", volume / "config.yaml")
    port = free_port()
    full = _env(volume, None, port)
    for var in ("FLUX7_DATABASE_URL", "DATABASE_URL", "FLUX7_TEST_CONFIG_DATABASE"):
        full.pop(var, None)
    full.update(env)
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen(
        [str(ENTRYPOINT)], env=full, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(lambda: proc.poll() is not None or up(), timeout=90, what=f"{name} to answer")
        assert proc.poll() is None, log.read_text()
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@pytest.mark.served
def test_three_instances_with_the_compose_environment_act_as_one(
    compose: dict[str, Any], tmp_path: Path, postgres_url: str
) -> None:
    env = instance_env(compose["services"]["flux7-1"], example_env())
    env["FLUX7_DATABASE_URL"] = postgres_url  # the test's server in place of the `postgres` service
    admin = {"Authorization": f"Bearer {env['MESH_ADMIN_TOKEN']}"}
    with ExitStack() as stack:
        urls = [stack.enter_context(instance(tmp_path, name, env)) for name in INSTANCES]
        grant = httpx.post(
            f"{urls[0]}/grants", json={"agent": "ops", "tools": "*", "duration": "1h"}, headers=admin, trust_env=False
        )
        assert grant.status_code == 201, grant.text
        for url in urls:  # the grant made on one instance is seen by all
            listed = httpx.get(f"{url}/grants", headers=admin, trust_env=False).json()
            assert [g["id"] for g in listed] == [grant.json()["id"]]
            report = httpx.get(f"{url}/traces/verify", headers=admin, trust_env=False).json()
            assert report.get("break") is None
        # no instance kept a SQLite file or generated its own secrets: the shared ones are in force
        for name in INSTANCES:
            assert not (tmp_path / name / "flux7.db").exists()
            assert not (tmp_path / name / "decisions.key").exists()
            assert not (tmp_path / name / "flux7-admin.token").exists()
        assert (
            httpx.get(f"{urls[2]}/grants", headers={"Authorization": "Bearer wrong"}, trust_env=False).status_code
            == 401
        )
