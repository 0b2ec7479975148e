"""`flux7 token enable|rotate|show` on a temporary root: the units' environment files, 0600, idempotent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import REPO

pytestmark = pytest.mark.served


def token(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "token", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )


def env_of(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_enable_fills_the_example_file_and_gives_sup7_the_same_secrets(tmp_path: Path) -> None:
    etc = tmp_path / "etc" / "flux7"
    etc.mkdir(parents=True)
    example = (REPO / "deploy" / "flux7.env.example").read_text()
    (etc / "flux7.env").write_text(example)
    (etc / "flux7.env").chmod(0o644)
    first = token(tmp_path, "enable", "--scopes", "/etc/flux7/scopes.yaml")
    assert first.returncode == 0, first.stderr
    server, supervisor = env_of(etc / "flux7.env"), env_of(etc / "sup7.env")
    for key in ("MESH_ADMIN_TOKEN", "MEM7_TOKEN"):
        assert len(server[key]) == 64 and not server[key].startswith("change-me")
        assert supervisor[key] == server[key]
    assert server["MEM7_SCOPES"] == supervisor["MEM7_SCOPES"] == "/etc/flux7/scopes.yaml"
    assert server["FLUX7_PORT"].startswith("8080")  # every other line kept
    assert [line for line in (etc / "flux7.env").read_text().splitlines() if line.startswith("#")] == [
        line for line in example.splitlines() if line.startswith("#")
    ]
    for name in ("flux7.env", "sup7.env"):
        assert (etc / name).stat().st_mode & 0o777 == 0o600
    again = token(tmp_path, "enable")
    assert again.returncode == 0 and "generated" not in again.stdout and "copied" not in again.stdout
    assert env_of(etc / "flux7.env") == server  # idempotent


def test_rotate_replaces_only_what_it_is_asked_to_in_both_files(tmp_path: Path) -> None:
    assert token(tmp_path, "enable").returncode == 0  # no file yet: both are created
    etc = tmp_path / "etc" / "flux7"
    before = env_of(etc / "flux7.env")
    rotated = token(tmp_path, "rotate", "--memory")
    assert rotated.returncode == 0 and "restart the units" in rotated.stderr
    after, supervisor = env_of(etc / "flux7.env"), env_of(etc / "sup7.env")
    assert after["MESH_ADMIN_TOKEN"] == before["MESH_ADMIN_TOKEN"]
    assert after["MEM7_TOKEN"] != before["MEM7_TOKEN"] and supervisor["MEM7_TOKEN"] == after["MEM7_TOKEN"]
    assert token(tmp_path, "rotate").returncode == 0
    assert env_of(etc / "flux7.env")["MESH_ADMIN_TOKEN"] != before["MESH_ADMIN_TOKEN"]


def test_show_masks_the_values_and_reports_the_modes(tmp_path: Path) -> None:
    missing = json.loads(token(tmp_path, "show", "--json").stdout)
    assert all(state["mode"] == "absent" for state in missing.values())
    token(tmp_path, "enable")
    shown = token(tmp_path, "show", "--json")
    report = json.loads(shown.stdout)
    secret = env_of(tmp_path / "etc" / "flux7" / "flux7.env")["MESH_ADMIN_TOKEN"]
    assert secret not in shown.stdout
    server = report[str(tmp_path / "etc" / "flux7" / "flux7.env")]
    assert server["mode"] == "600" and server["MESH_ADMIN_TOKEN"] == f"{secret[:6]}… (64 characters)"


def test_a_root_it_cannot_write_is_a_short_error(tmp_path: Path) -> None:
    blocked = tmp_path / "etc"
    blocked.write_text("not a directory")
    r = token(tmp_path, "enable")
    assert r.returncode == 1 and r.stderr.startswith("flux7 token ") and "Traceback" not in r.stderr
