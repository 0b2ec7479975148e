"""docs/agent.md's worked policy example, and the example policies the repository ships for the agent, decide as
the manual says."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.server import REPO

Call = tuple[str, str, dict[str, str]]


async def decisions(tmp_path: Path, policies: dict[str, str], calls: list[Call]) -> list[str]:
    (tmp_path / "policies").mkdir(exist_ok=True)
    for name, text in policies.items():
        (tmp_path / "policies" / name).write_text(text)
    (tmp_path / "config.yaml").write_text(
        f"policy_dir: {tmp_path}/policies\nstorage_path: {tmp_path}/flux7.db\nmemory: {{enabled: false}}\n"
    )
    mesh = Mesh(load_settings(tmp_path / "config.yaml", env={}))
    await mesh.start()
    try:
        return [mesh.policies.current.decide(agent, tool, args).action for agent, tool, args in calls]
    finally:
        await mesh.stop()


async def test_the_worked_example_decides_as_the_manual_says(tmp_path: Path) -> None:
    manual = (REPO / "docs" / "agent.md").read_text()
    section = manual[manual.index("## Governing the agent with a policy") :]
    example = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert example is not None
    got = await decisions(
        tmp_path,
        {"coders.yaml": example.group(1)},
        [
            ("flux7-agent", "edit_file", {"path": "src/app.py"}),
            ("flux7-agent", "write_file", {"path": "secrets/keys.txt"}),
            ("flux7-agent", "edit_file", {"path": "release/notes.md"}),
            ("flux7-agent", "shell", {"command": "git push origin main"}),
            ("flux7-agent", "shell", {"command": "pytest -q"}),
        ],
    )
    assert got == ["allow", "deny", "human_approval", "deny", "allow"]


async def test_the_shipped_policies_let_the_agent_read_and_hold_its_changes(tmp_path: Path) -> None:
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    got = await decisions(
        tmp_path,
        {},
        [
            ("flux7-agent", "read_file", {"path": "a"}),
            ("flux7-agent", "grep", {"pattern": "x"}),
            ("flux7-agent", "edit_file", {"path": "a"}),
            ("flux7-agent", "shell", {"command": "make"}),
            ("flux7-agent/explorer", "grep", {"pattern": "x"}),
            ("flux7-agent/explorer", "shell", {"command": "make"}),
        ],
    )
    assert got == ["allow", "allow", "human_approval", "human_approval", "allow", "deny"]
