"""The `tty` approval channels on the stdio transport (CONTRACT 1.14 step 1), without a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.functions.conftest import make_config
from tests.support.server import REPO
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from flux7.shared.auth.identity import Caller
    from flux7.shared.mesh import Mesh
    from flux7.shared.gate.pipeline import Call
    from flux7.shared.gate.tty_prompt import terminal_channel
    from flux7.shared.settings import load_settings
    from flux7.shared.tracecontext import from_headers

    async def main():
        mesh = Mesh(load_settings(sys.argv[1], {}))
        await mesh.start()
        call = Call(caller=Caller(agent_id="claude"), tool="create_pet", arguments={"name": "Kit"},
                    trace=from_headers(None, None), transport="stdio")
        out = await mesh.pipeline.run(call, mode="claim", terminal=terminal_channel(mesh.settings.approval.channel))
        print(json.dumps({"status": out.status, "approval_status": out.approval_status,
                          "resolved_by": out.resolved_by}))
        await mesh.stop()

    asyncio.run(main())
    """
)


def run_without_terminal(cfg: Path) -> dict[str, object]:
    # a new session has no controlling terminal: /dev/tty cannot be opened, as under an agent or in CI
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(cfg)], capture_output=True, text=True, cwd=REPO, start_new_session=True
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_tty_channel_without_a_terminal_denies(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend)
    cfg.write_text(cfg.read_text().replace("channel: queue", "channel: tty"))
    assert run_without_terminal(cfg) == {"status": 403, "approval_status": "denied", "resolved_by": "tty"}


def test_tty_fallback_without_a_terminal_leaves_the_approval_to_the_queue(tmp_path: Path, backend: Backend) -> None:
    cfg = make_config(tmp_path, backend)
    cfg.write_text(cfg.read_text().replace("channel: queue", "channel: tty-fallback"))
    assert run_without_terminal(cfg) == {"status": 202, "approval_status": "pending", "resolved_by": ""}
