"""Issue 34, `flux7 agent` as a daily driver: the rows of the feature table that were missing (Claude Code, Codex
and Aider have them), each with tests of its own: the diff before an edit is approved, permission rules,
checkpoints with /undo and /rewind, project memory files and /init, cost. The rows that were broken are
test_daily_driver.py's (and test_pty.py's for Ctrl-C)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.agent.agent import Agent, Question, Workspace
from flux7.shared.agent.checkpoints import UndoRefused
from flux7.shared.agent.config import agent_md_files
from flux7.shared.agent.cost import Prices
from flux7.shared.agent.llm import make_chat
from flux7.shared.agent.mesh_tools import MeshTools
from flux7.shared.agent.permissions import Permissions, parse_rule
from flux7.shared.agent.sessions import Session, SessionStore
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.agent.llm_stream_servers import last_tool_results, openai_stream
from tests.agent.test_cli import agent_cli, agent_env
from tests.agent.test_coding_agent import (
    POLICY,
    mesh,  # noqa: F401 -- the module's mesh: a real `flux7 serve`, no admin token
    openai_env,
    project,
    run_agent,
    session_rows,
    tool,
    turns,
)
from tests.agent.test_daily_driver import _mesh_transport
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

Steps = list[tuple[str, ...]]


# Row 9: the diff before an edit is approved, at the terminal and in the mesh.


async def test_an_edit_s_diff_is_shown_before_the_question_and_sent_with_decide(
    tmp_path: Path, backend: Backend
) -> None:
    work = project(tmp_path)
    big = "".join(f"line {i}\n" for i in range(20_000))  # a diff over 64 KiB
    script = turns(
        tool("edit_file", path="src/app.py", old_text="'hello'", new_text="'hi'"),
        tool("write_file", path="big.txt", content=big),
        tool("edit_file", path="src/app.py", old_text="'hi'", new_text="'hey'"),
        [("text", "ok")],
    )
    asked: list[Question] = []

    async def confirm(question: Question) -> str:
        asked.append(question)
        if len(asked) == 3:  # the file changes after its diff was shown: what was approved is not what it would do
            (work / "src" / "app.py").write_text("GREETING = 'hi'\n# changed meanwhile\n")
        return "yes"

    with openai_stream(script) as llm:
        governed = Mesh(load_settings(pets_mesh_config(tmp_path, backend, POLICY), env={}))
        async with _mesh_transport(governed) as (transport, decided):
            chat = make_chat("openai", "m", url=llm.url, api_key="sk-test", backoff=0)
            agent = Agent(
                chat,
                MeshTools("http://mesh", "coder", session_id="diff-1", transport=transport),
                workspace=Workspace(work, tmp_path, mode="on-request", confirm=confirm),
            )
            events = [e async for e in agent.run("greet shorter")]
    confirms = [e for e in events if e.type == "tool_call_confirm"]
    assert "-GREETING = 'hello'\n+GREETING = 'hi'\n" in confirms[0].diff  # shown before the question
    assert asked[0].diff == confirms[0].diff
    first = decided[0]["preview"]
    assert first["kind"] == "diff" and first["path"] == "src/app.py"
    assert first["diff"].startswith("--- a/src/app.py\n+++ b/src/app.py\n") and "+GREETING = 'hi'" in first["diff"]
    second = decided[1]["preview"]
    assert len(second["diff"].encode()) + len(second["path"].encode()) <= 64 * 1024  # what the mesh takes
    assert "[... diff truncated: " in second["diff"]
    assert (work / "big.txt").read_text() == big  # the file itself is whole
    results = last_tool_results(llm.bodies[3])
    assert results[0].startswith("error: src/app.py changed since this edit was shown for approval")
    assert (work / "src" / "app.py").read_text() == "GREETING = 'hi'\n# changed meanwhile\n"


# Row 10: permission rules.


def test_permission_rules_answer_the_question_and_never_lift_a_refusal(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    (work / "secrets").mkdir()
    home = tmp_path / "home"
    (home / ".config" / "flux7").mkdir(parents=True)
    (home / ".config" / "flux7" / "agent.toml").write_text(
        "# mine\n[permissions]\n"
        'allow = ["edit_file(src/**)", "write_file", "shell(git status*)", "shell(rm *)"]\n'
        'deny = ["shell(git push*)"]\n'
    )
    script = turns(
        tool("edit_file", path="src/app.py", old_text="'hello'", new_text="'hi'"),  # allowed by a rule
        tool("edit_file", path=".gitignore", old_text="build/", new_text="dist/"),  # no rule: asks, nobody: refused
        tool("write_file", path="secrets/k.txt", content="x"),  # a rule allows; the mesh's policy denies
        tool("shell", command="git status; touch x.txt"),  # only part of it is allowed: asks, refused
        tool("shell", command="rm -rf / --no-preserve-root"),  # the safety layer refuses, whatever the rule
        tool("write_file", path="../outside.txt", content="x"),  # a tool-wide rule covers the project only: asks
        [("text", "done")],
    )
    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "go", "--session", "rules-1"], work)
    assert done.returncode == 0, done.stderr
    results = [last_tool_results(b)[0] for b in llm.bodies[1:6]]
    assert results[0].startswith("edited src/app.py")
    assert results[1].startswith("refused: the user did not confirm it")
    assert results[2].startswith("refused by policy:")
    assert results[3].startswith("refused: the user did not confirm it")
    assert results[4].startswith("refused: dangerous command refused by the local safety layer")
    assert last_tool_results(llm.bodies[6])[0].startswith("refused: the user did not confirm it (../outside.txt")
    assert not (tmp_path / "outside.txt").exists()
    assert not (work / "x.txt").exists()
    rows = session_rows(mesh, "rules-1")
    assert [(r["tool"], r["policy"]) for r in rows] == [("edit_file", "allow"), ("write_file", "deny")]
    with openai_stream(turns(tool("shell", command="git push origin main"), [("text", "ok")])) as llm:
        denied = run_agent(mesh, tmp_path, llm.url, ["-p", "ship", "--mode", "yolo"], work)
    assert last_tool_results(llm.bodies[1])[0].startswith("refused: your permission rule deny shell(git push*)"), (
        denied.stderr
    )


def test_an_untrusted_project_s_permission_rules_are_ignored(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    (work / ".flux7").mkdir()
    (work / ".flux7" / "agent.toml").write_text('[permissions]\nallow = ["shell"]\n')
    with openai_stream(turns(tool("shell", command="touch x.txt"), [("text", "ok")])) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "go"], work)
        trusted = run_agent(mesh, tmp_path, llm.url, ["-p", "go", "--trust"], work)
    assert "permissions.allow (answers the agent's questions with yes)" in done.stderr
    assert last_tool_results(llm.bodies[1])[0].startswith("refused: the user did not confirm it")
    assert trusted.returncode == 0 and (work / "x.txt").exists()  # once trusted, the project's rule applies


def test_always_at_a_question_saves_a_rule_listed_and_removed_with_permissions(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)

    def script(body: dict[str, Any]) -> Steps:
        if last_tool_results(body):
            return [("text", "ok")]
        return tool("edit_file", path="src/app.py", old_text="GREETING", new_text="GREETING", replace_all=True)

    user_toml = tmp_path / "home" / ".config" / "flux7" / "agent.toml"
    with openai_stream(script) as llm:
        stdin = "edit\na\nedit again\n/permissions\n/permissions remove 1\n/permissions\n"
        done = run_agent(mesh, tmp_path, llm.url, ["--session", "always-1"], work, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("run edit_file? [y/N/a/t]") == 1  # the second edit ran without asking
    assert "(a: always allow edit_file(src/app.py) · t: always allow edit_file)" in done.stderr
    assert f"note: saved allow edit_file(src/app.py) in {user_toml}" in done.stderr
    assert "  1. allow edit_file(src/app.py)" in done.stdout and f"removed allow edit_file(src/app.py) from {user_toml}"
    assert "no permission rules" in done.stdout
    assert "edit_file(src/app.py)" not in user_toml.read_text()


def test_a_shell_allow_rule_covers_each_simple_command_and_nothing_around_it(tmp_path: Path) -> None:
    allowed = [parse_rule("shell(git status*)", "allow", "f"), parse_rule("shell(ls)", "allow", "f")]
    rules = Permissions(allowed, tmp_path, tmp_path / "f")

    def decided(command: str) -> str:
        rule = rules.decide("shell", {"command": command}, tmp_path)
        return rule.text if rule else ""

    assert decided("git status --short") == "shell(git status*)"
    assert decided("git status && ls") == "shell(git status*)"  # each part is allowed by one rule or another
    assert decided("git status; rm -rf src") == ""
    assert decided("git status > out.txt") == ""  # a redirection: not a command a rule can vouch for
    assert decided("git status $(rm x)") == ""


# Row 11: checkpoints, /undo and /rewind.


def test_undo_and_rewind_put_files_back_and_the_trail_keeps_what_happened(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    original = (work / "src" / "app.py").read_text()

    def script(body: dict[str, Any]) -> Steps:
        prompt = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        if last_tool_results(body):
            return [("text", "ok")]
        if prompt == "shorter":
            return tool("edit_file", path="src/app.py", old_text="'hello'", new_text="'hi'")
        if prompt == "notes":
            return tool("write_file", path="NOTES.md", content="notes\n")
        return [("text", "ok")]

    with openai_stream(script) as llm:
        stdin = "shorter\nnotes\n/rewind\n/undo\n/rewind 1\n/undo\nwhat now?\n"
        done = run_agent(mesh, tmp_path, llm.url, ["--session", "undo-1", "--mode", "auto"], work, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert "  1. 'shorter': src/app.py\n  2. 'notes': NOTES.md\n" in done.stdout
    assert "undone: write_file of NOTES.md (prompt 2)" in done.stdout and not (work / "NOTES.md").exists()
    assert "rewound 1 changes: src/app.py" in done.stdout and (work / "src" / "app.py").read_text() == original
    assert "nothing to undo" in done.stdout
    told = [m["content"] for m in llm.bodies[-1]["messages"] if m["role"] == "user"][-1]
    assert told.startswith("(the user put these files back as they were before prompt 1: src/app.py)")
    assert [(r["tool"], r["policy"]) for r in session_rows(mesh, "undo-1")] == [
        ("edit_file", "allow"),
        ("write_file", "allow"),
    ]


async def test_undo_leaves_a_file_changed_since_as_it_is(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\n")
    script = turns(tool("edit_file", path="a.txt", old_text="one", new_text="two"), [("text", "ok")])
    with openai_stream(script) as llm:
        store = SessionStore(tmp_path / "sessions")
        agent = Agent(
            make_chat("openai", "m", url=llm.url, api_key="sk-test"),
            MeshTools("http://127.0.0.1:9", "x"),
            workspace=Workspace(work, tmp_path, mode="auto", offline=True),
            store=store,
            session=Session("u-1", str(work)),
        )
        [e async for e in agent.run("edit")]
    (work / "a.txt").write_text("three\n")  # the user changed it again
    points = agent.checkpoints
    assert points is not None
    with pytest.raises(UndoRefused, match=r"a\.txt changed since the agent's edit_file"):
        points.undo()
    assert (work / "a.txt").read_text() == "three\n"


# Row 12: project memory files and /init.


def test_agents_md_and_claude_md_are_read_one_per_folder_agent_md_first(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "AGENTS.md").write_text("root agents")
    (repo / "CLAUDE.md").write_text("root claude")  # AGENTS.md comes first in the same folder
    (repo / "pkg" / "CLAUDE.md").write_text("pkg claude")
    home = tmp_path / "home"
    (home / ".config" / "flux7").mkdir(parents=True)
    (home / ".config" / "flux7" / "AGENT.md").write_text("mine")
    (repo / "pkg" / "AGENT.md").write_text("pkg agent")
    found = agent_md_files(repo / "pkg", {}, home)
    assert found == [home / ".config/flux7/AGENT.md", repo / "AGENTS.md", repo / "pkg" / "AGENT.md"]


def test_init_asks_the_model_for_agent_md_and_its_write_passes_both_gates(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    (work / "pyproject.toml").write_text("[project]\nname = 'app'\n")

    def script(body: dict[str, Any]) -> Steps:
        prompt = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        if last_tool_results(body):
            return [("text", "Wrote AGENT.md.")]
        assert prompt.startswith("Write a starting AGENT.md") and "pyproject.toml" in prompt, prompt
        return tool("write_file", path="AGENT.md", content="# app\n\nTest with pytest -q.\n")

    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["--session", "init-1", "--mode", "auto-edit"], work, stdin="/init\n")
    assert done.returncode == 0, done.stderr
    assert (work / "AGENT.md").read_text() == "# app\n\nTest with pytest -q.\n"
    assert [(r["tool"], r["policy"]) for r in session_rows(mesh, "init-1")] == [("write_file", "allow")]


# Row 13: cost.


def test_prices_have_defaults_for_common_models_and_the_config_adds_its_own() -> None:
    prices = Prices({"my-model": (1.0, 2.0)})
    assert prices.of("anthropic", "claude-sonnet-4-5-20250929") == (3.0, 15.0)
    assert prices.of("openai", "gpt-4o-mini") == (0.15, 0.6) and prices.of("openai", "gpt-4o") == (2.5, 10.0)
    assert prices.of("ollama", "qwen2.5-coder") == (0.0, 0.0)
    assert prices.of("openai", "unknown-model") is None
    assert prices.cost("openai", "my-model-v2", {"input_tokens": 1_000_000, "output_tokens": 500_000}) == 2.0


def test_cost_per_prompt_and_session_in_the_events_and_with_cost(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "flux7").mkdir(parents=True)
    (home / ".config" / "flux7" / "agent.toml").write_text('[prices."fake"]\ninput = 1000.0\noutput = 2000.0\n')
    with openai_stream(lambda _b: [("text", "hi")]) as llm:
        json_run = agent_cli(["-p", "hi", "--offline", "--json"], llm.url, home, extra_env=openai_env())
        repl = agent_cli(["--offline"], llm.url, home, extra_env=openai_env(), stdin="/cost\none\ntwo\n/cost\n")
    end = [json.loads(line) for line in json_run.stdout.splitlines()][-1]
    assert end["type"] == "agent_end" and end["cost"] == {"prompt": 0.026, "session": 0.026}  # 12 in, 7 out
    assert "session $0.0000 (0 in / 0 out tokens)" in repl.stdout
    assert "last prompt $0.0260 · session $0.0520 (24 in / 14 out tokens)" in repl.stdout


def test_the_mesh_s_approval_carries_the_edit_s_diff(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    (work / "release").mkdir()
    (work / "release" / "notes.md").write_text("version 1\n")
    script = turns(tool("edit_file", path="release/notes.md", old_text="1", new_text="2"), [("text", "ok")])
    with openai_stream(script) as llm:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flux7.functions.entry",
                "agent",
                "--mesh",
                mesh.url,
                "-p",
                "bump",
                "--mode",
                "auto",
                "--session",
                "preview-1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=agent_env(llm.url, tmp_path / "home", openai_env()),
            cwd=work,
        )
        try:
            held = wait_until(
                lambda: [
                    a
                    for a in httpx.get(f"{mesh.url}/approvals", params={"status": "pending"}, trust_env=False).json()
                    if a["tool"] == "edit_file" and a["params"]["path"] == "release/notes.md"
                ],
                timeout=30,
            )
            httpx.post(f"{mesh.url}/approvals/{held[0]['id']}/deny", json={"resolved_by": "ops"}, trust_env=False)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert held[0]["preview"] == {
        "kind": "diff",
        "path": "release/notes.md",
        "diff": "--- a/release/notes.md\n+++ b/release/notes.md\n@@ -1 +1 @@\n-version 1\n+version 2\n",
    }
    assert (work / "release" / "notes.md").read_text() == "version 1\n"
