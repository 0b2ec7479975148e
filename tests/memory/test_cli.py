"""`mem7` subcommands as a user runs them: rescan, prune, verify, export, and a wrong subcommand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.memory.cli import config_from_env, listen_address
from flux7.shared.memory.service import MemoryService

from .conftest import REPO, call


def mem7(
    directory: Path, *args: str, key: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEM7_DIR": str(directory), "MEM7_HYBRID": "0", "MEM7_CHAIN_KEY": key, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", "from flux7.functions.entry import mem7_main; raise SystemExit(mem7_main())", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_env_is_read_once_into_the_config() -> None:
    config = config_from_env({"MEM7_DIR": "/x", "MEM7_MAX_ENTRIES": "5", "MEM7_TOKEN": "t", "MEM7_SCOPES": "s.json"})
    assert (config.dir, config.max_entries, config.token, config.scopes_file) == ("/x", 5, "t", "s.json")
    assert listen_address(":9070") == ("0.0.0.0", 9070)
    assert listen_address("[::1]:80") == ("::1", 80)


@pytest.mark.served
def test_verify_prints_the_report_and_fails_on_a_break(make_service: Any, tmp_path: Path) -> None:
    root = tmp_path / "m"
    service: MemoryService = make_service(root, chain_key="k")
    call(service, "memory_store", key="a", value="alpha")
    call(service, "memory_store", key="b", value="beta")
    ok = mem7(root, "verify", key="k")
    assert (ok.returncode, ok.stdout) == (
        0,
        "2 entries: 2 sealed, 0 written before the chain\nseals: HMAC-SHA256 with MEM7_CHAIN_KEY\nchain holds\n",
    )
    unkeyed = mem7(root, "verify")
    assert unkeyed.returncode == 1 and "(or it was sealed with a key: set MEM7_CHAIN_KEY)" in unkeyed.stdout
    daily = next((root / "workspace" / "memory").glob("*.md"))
    daily.write_text(daily.read_text().replace("beta", "BETA"))
    broken = mem7(root, "verify", "--json", key="k")
    assert broken.returncode == 1 and '"entity": "b"' in broken.stdout


@pytest.mark.served
def test_rescan_prune_and_export(make_service: Any, tmp_path: Path) -> None:
    root = tmp_path / "m"
    service: MemoryService = make_service(root)
    call(service, "memory_store", key="a", value="alpha")
    call(service, "memory_store", key="b", value="beta")
    call(service, "memory_forget", key="a")
    service.close()
    rescan = mem7(root, "rescan")
    assert rescan.returncode == 0 and "rescan complete, 1 live entries in index" in rescan.stdout
    assert mem7(root, "prune").stdout == "pruned 0 expired memories\n"
    export = mem7(root, "export", "--to", str(tmp_path / "copy"))
    assert export.returncode == 0 and "exported 2 workspace file(s)" in export.stdout
    (original,) = (root / "workspace" / "memory").glob("*.md")
    assert (tmp_path / "copy" / "workspace" / "memory" / original.name).read_bytes() == original.read_bytes()
    original.write_text("edited\n")
    conflict = mem7(root, "export")
    assert conflict.returncode == 1 and "differs from the journal" in conflict.stderr


@pytest.mark.served
def test_an_unknown_subcommand_is_refused(tmp_path: Path) -> None:
    result = mem7(tmp_path, "frobnicate")
    assert result.returncode == 2  # a usage error, as everywhere in the flux7 tree
    assert result.stderr.splitlines() == [
        'mem7: unknown subcommand "frobnicate" '
        "(valid: mcp, serve, rescan, prune, verify, export, store, search, recall, forget)",
        "Run 'mem7 --help' for usage.",
    ]
