"""Hooks as real shell commands: a JSON decision blocks, a slow or broken before_tool hook blocks (fail closed),
any other hook's failure is reported without stopping anything."""

from __future__ import annotations

from pathlib import Path

from flux7.shared.agent.config import HookConfig
from flux7.shared.agent.hooks import Hooks


async def test_a_json_decision_on_stdout_blocks_with_its_reason(tmp_path: Path) -> None:
    say = """echo '{"decision": "block", "reason": "not on Fridays"}'"""
    hooks = Hooks((HookConfig("before_tool", command=say),), tmp_path, "s")
    fired = await hooks.fire("before_tool", {"tool": "shell", "arguments": {}})
    assert (fired.blocked, fired.reason) == (True, "not on Fridays")


async def test_a_before_tool_hook_that_times_out_or_cannot_run_blocks(tmp_path: Path) -> None:
    slow = Hooks((HookConfig("before_tool", command="sleep 30", timeout=0.2),), tmp_path, "s")
    fired = await slow.fire("before_tool", {"tool": "shell", "arguments": {}})
    assert fired.blocked and "timed out after 0.2 s" in fired.reason and "fail closed" in fired.reason
    missing = Hooks((HookConfig("before_tool", script="no/such/hook.sh"),), tmp_path, "s")
    fired = await missing.fire("before_tool", {"tool": "shell", "arguments": {}})
    assert fired.blocked and f"no script at {tmp_path}/no/such/hook.sh" in fired.reason


async def test_other_hooks_report_failures_and_never_block(tmp_path: Path) -> None:
    script = tmp_path / "hook.sh"
    script.write_text("cat > seen.json\nexit 1\n")
    hooks = Hooks(
        (HookConfig("after_tool", script="hook.sh"), HookConfig("after_tool", command="sleep 5", timeout=0.2)),
        tmp_path,
        "sess-9",
    )
    fired = await hooks.fire("after_tool", {"tool": "read_file"})
    assert not fired.blocked
    assert [p.split(":")[0] for p in fired.problems] == [
        "after_tool hook 'hook.sh' exited 1",
        "after_tool hook 'sleep 5'",
    ]
    assert (tmp_path / "seen.json").read_text() == (
        f'{{"event": "after_tool", "session_id": "sess-9", "cwd": "{tmp_path}", "tool": "read_file"}}'
    )
