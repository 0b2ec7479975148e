"""docs/memory.md's quickstart, run as written (curl, then the published SDK) against a real `flux7 serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import REPO, running_server

pytestmark = pytest.mark.served

DOC = REPO / "docs" / "memory.md"


def _blocks(language: str) -> list[str]:
    section = DOC.read_text().split("## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_the_memory_quickstart_works_as_documented(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("storage_path: data/flux7.db\nmemory: {enabled: true}\n")
    shell = _blocks("sh")[0]  # the curl block (the next one, the CLI's, runs in tests/e2e/test_doc_walkthroughs.py)
    (python,) = _blocks("python")
    with running_server(cfg) as server:
        here = f"localhost:{server.port}"
        curl = subprocess.run(
            ["bash", "-c", shell.replace("localhost:9090", here)], capture_output=True, text=True, timeout=60
        )
        assert curl.returncode == 0, curl.stderr
        assert "Memory 'deploy-window' created (1 total entries)" in curl.stdout
        assert "1 results (ranked by relevance):\\n\\n## deploy-window\\nProduction deploys" in curl.stdout
        assert '[{\\"key\\":\\"deploy-window\\",\\"value\\":\\"Production deploys happen on Tuesdays' in curl.stdout
        sdk = subprocess.run(
            [sys.executable, "-c", python.replace("localhost:9090", here)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "NO_PROXY": "*"},
        )
        assert sdk.returncode == 0, sdk.stderr
        assert "## coffee\nThe team orders from the place on 5th street." in sdk.stdout
        assert "coffee -> The team orders from the place on 5th street." in sdk.stdout
        verify = subprocess.run(
            [
                sys.executable,
                "-m",
                "flux7.functions.entry",
                "memory",
                "verify",
                "--db",
                str(tmp_path / "data" / "flux7.db"),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert verify.returncode == 0 and verify.stdout.endswith("chain holds\n"), verify.stdout + verify.stderr
