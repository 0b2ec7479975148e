from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flux7.shared.settings import load_policy_dir
from tests.functions.conftest import make_config
from tests.support.server import REPO
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served


def test_discover_drafts_a_loadable_policy_from_the_upstreams(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from flux7.functions.entry import mesh7_main; raise SystemExit(mesh7_main())",
            "discover",
            "--config",
            str(cfg),
            "--agent",
            "bot-*",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    draft = yaml.safe_load(r.stdout)
    assert draft["agent"] == "bot-*"
    allow, ask = draft["rules"]
    assert "list_pets" in allow["tools"] and allow["action"] == "allow"
    assert "delete_pet" in ask["tools"] and ask["action"] == "human_approval"
    out = tmp_path / "drafted"
    out.mkdir()
    (out / "d.yaml").write_text(r.stdout)
    assert load_policy_dir(out)[0].name == "discovered"
