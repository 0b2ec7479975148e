"""`flux7 agent` as a coding agent, end to end: a scripted streaming model on loopback, a real `flux7 serve`
process, the CLI as a subprocess in a working directory of files. Every built-in call passes the local safety
layer, then the mesh's `POST /decide`, runs, and reports its outcome; each test reads the trace rows the mesh
wrote."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.llm_stream_servers import last_tool_results, openai_stream
from tests.agent.test_cli import agent_cli, agent_env
from tests.support.mesh import pets_mesh_config
from tests.support.server import REPO, Server, running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import running_backend

pytestmark = pytest.mark.served

Step = tuple[str, ...]

POLICY = """
name: coders
agent: "*"
rules:
  - tools: ["write_file"]
    action: deny
    condition: {field: path, operator: starts_with, value: "secrets"}
  - tools: ["edit_file"]
    action: human_approval
    condition: {field: path, operator: starts_with, value: "release"}
  - tools: ["echo.write_file"]
    action: deny
  - tools: ["*"]
    action: allow
"""

# Sub-agents are `<parent>/<name>`: `*` does not cross `/`, so the policy above does not reach them; this one does.
EXPLORERS = """
name: explorers
agent: "*/explorer"
rules:
  - tools: ["grep", "glob", "list_dir"]
    action: allow
  - tools: ["*"]
    action: deny
"""


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One mesh for the module (each test uses its own session ids). No admin token: on loopback the control
    plane is open, so the agent can name the approval a held call waits for."""
    folder = tmp_path_factory.mktemp("mesh")
    with running_backend() as backend:
        config = pets_mesh_config(folder, backend, POLICY, admin_token=None)
        (folder / "policies" / "explorers.yaml").write_text(EXPLORERS)
        with running_server(config) as s:
            yield s


def session_rows(server: Server, session_id: str) -> list[dict[str, Any]]:
    """The mesh's trace rows of one session, oldest first."""
    rows = httpx.get(f"{server.url}/sessions/{session_id}", trust_env=False).json()
    return sorted(rows, key=lambda r: r["timestamp"])


def turns(*steps: list[Step]) -> Any:
    """A model that answers its k-th turn of a prompt (k = the assistant turns after the last user message) with
    steps[k]; the last turn's text gets the tool results it was sent appended, so the test sees what it read."""

    def script(body: dict[str, Any]) -> list[Step]:
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        k = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
        chosen = list(steps[min(k, len(steps) - 1)])
        if k >= len(steps) - 1:
            chosen.append(("text", " | " + " | ".join(last_tool_results(body))))
        return chosen

    return script


def tool(_tool: str, **arguments: Any) -> list[Step]:
    return [("tool", _tool, json.dumps(arguments))]


def openai_env() -> dict[str, str]:
    return {"FLUX7_LLM_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test", "FLUX7_LLM_MODEL": "fake"}


def run_agent(
    mesh: Server, tmp_path: Path, llm_url: str, args: list[str], work: Path, *, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return agent_cli(
        ["--mesh", mesh.url, *args], llm_url, tmp_path / "home", cwd=work, extra_env=openai_env(), stdin=stdin
    )


def project(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "build").mkdir()
    (work / ".gitignore").write_text("build/\n")
    (work / "src" / "app.py").write_text("GREETING = 'hello'\n\n\ndef main():\n    print(GREETING)\n")
    (work / "build" / "app.py").write_text("GREETING = 'stale copy'\n")
    return work


def test_a_multi_turn_task_reads_edits_greps_and_runs_a_command(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    script = turns(
        tool("read_file", path="src/app.py", start_line=1, end_line=1),
        tool("edit_file", path="src/app.py", old_text="'hello'", new_text="'hi'"),
        tool("grep", pattern="GREETING ="),
        tool("shell", command="python3 -c \"import sys; sys.path.insert(0, 'src'); import app; print(app.GREETING)\""),
        [("text", "Done.")],
    )
    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "Say hi", "--mode", "auto", "--session", "task-1"], work)
    assert done.returncode == 0, done.stderr
    assert (work / "src" / "app.py").read_text().startswith("GREETING = 'hi'\n")
    results = [last_tool_results(b) for b in llm.bodies[1:]]
    assert results[0] == ["     1\tGREETING = 'hello'"]  # a line range, numbered
    assert results[1][0].startswith("edited src/app.py") and "-GREETING = 'hello'\n+GREETING = 'hi'" in results[1][0]
    assert results[2] == ["src/app.py:1: GREETING = 'hi'"]  # build/ is in .gitignore: not searched
    assert results[3] == ["exit code 0\nhi\n"]
    assert "+GREETING = 'hi'" in done.stderr  # the edit's diff is shown
    rows = session_rows(mesh, "task-1")
    assert [(r["agent_id"], r["tool"], r["policy"], r["status_code"]) for r in rows] == [
        ("flux7-agent", "read_file", "allow", 200),
        ("flux7-agent", "edit_file", "allow", 200),
        ("flux7-agent", "grep", "allow", 200),
        ("flux7-agent", "shell", "allow", 200),
    ]
    assert rows[1]["params"] == {"path": "src/app.py", "old_text": "'hello'", "new_text": "'hi'"}
    assert rows[3]["exit_code"] == 0 and "exit_code" not in rows[0]  # the outcome each call reported
    assert all(r["revision"] == 1 for r in rows)  # the /decide row, completed by its outcome: one call each


def test_a_dangerous_command_is_refused_locally_and_never_reaches_the_mesh(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    script = turns(tool("shell", command="rm -rf / --no-preserve-root"), tool("list_dir", path="."), [])
    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "clean up", "--mode", "yolo", "--session", "danger-1"], work)
    assert done.returncode == 0, done.stderr
    refused = last_tool_results(llm.bodies[1])[0]
    assert refused.startswith("refused: dangerous command refused by the local safety layer: recursive delete")
    assert "← local refused" in done.stderr
    assert (work / "src" / "app.py").exists()
    # Only the list_dir that followed reached the mesh: the refused command left no trace.
    assert [(r["tool"], r["policy"]) for r in session_rows(mesh, "danger-1")] == [("list_dir", "allow")]


def test_a_mutating_call_the_mesh_denies_leaves_the_file_untouched(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    (work / "secrets").mkdir()
    (work / "secrets" / "keys.txt").write_text("original\n")
    script = turns(tool("write_file", path="secrets/keys.txt", content="leaked\n"), [])
    with openai_stream(script) as llm:
        args = ["-p", "rotate", "--mode", "yolo", "--session", "deny-1", "--json"]
        done = run_agent(mesh, tmp_path, llm.url, args, work)
    assert done.returncode == 0, done.stderr
    assert (work / "secrets" / "keys.txt").read_text() == "original\n"
    assert last_tool_results(llm.bodies[1])[0].startswith("refused by policy:")
    rows = session_rows(mesh, "deny-1")
    assert [(r["tool"], r["policy"], r["policy_rule"], r["status_code"]) for r in rows] == [
        ("write_file", "deny", "coders", 403)
    ]
    assert rows[0]["params"] == {"path": "secrets/keys.txt", "content": "leaked\n"}
    # --json: the event stream, one object a line: the call streamed in (name, then argument pieces), then decided.
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert kinds.index("tool_call_streaming") < kinds.index("tool_call_delta") < kinds.index("tool_call_complete")
    assert "".join(e["text"] for e in events if e["type"] == "tool_call_delta") == json.dumps(
        {"path": "secrets/keys.txt", "content": "leaked\n"}
    )
    complete = next(e for e in events if e["type"] == "tool_call_complete")
    assert (complete["tool"], complete["policy"], complete["gate"], complete["trace_id"]) == (
        "write_file",
        "deny",
        "mesh",
        rows[0]["trace_id"],
    )


def test_a_call_held_for_approval_waits_and_runs_once_released_through_the_mesh(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    (work / "release").mkdir()
    (work / "release" / "notes.md").write_text("version 1\n")
    script = turns(tool("edit_file", path="release/notes.md", old_text="1", new_text="2"), [])
    with openai_stream(script) as llm:
        args = ["--mesh", mesh.url, "-p", "bump", "--mode", "auto", "--session", "held-1", "--agent-id", "rel"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "flux7.functions.entry", "agent", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=agent_env(llm.url, tmp_path / "home", openai_env()),
            cwd=work,
        )
        lines: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        try:
            held = wait_until(
                lambda: httpx.get(f"{mesh.url}/approvals", params={"status": "pending"}, trust_env=False).json(),
                timeout=30,
            )
            assert [(a["agent_id"], a["tool"]) for a in held] == [("rel", "edit_file")]
            wait_until(lambda: any(f"approval {held[0]['id']} is pending" in line for line in lines), timeout=30)
            assert (work / "release" / "notes.md").read_text() == "version 1\n"  # nothing ran while it waited
            pending = session_rows(mesh, "held-1")
            assert [(r["policy"], r["status_code"], r["approval_id"]) for r in pending] == [
                ("human_approval", 202, held[0]["id"])
            ]
            approved = httpx.post(
                f"{mesh.url}/approvals/{held[0]['id']}/approve", json={"resolved_by": "ops"}, trust_env=False
            )
            assert approved.status_code == 200
            assert proc.stdout is not None
            out = proc.stdout.read()
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(5)
    assert proc.returncode == 0, "".join(lines)
    assert (work / "release" / "notes.md").read_text() == "version 2\n"
    assert "edited release/notes.md" in out
    rows = session_rows(mesh, "held-1")
    assert [(r["tool"], r["policy"], r["approval_status"], r["approved_by"], r["status_code"]) for r in rows] == [
        ("edit_file", "human_approval", "approved", "ops", 200),
        ("mesh.approval", "allow", "approved", "ops", 200),  # the mesh's own record of the human's decision
    ]


def test_a_session_is_saved_quit_resumed_and_continued_under_the_same_mesh_session(
    mesh: Server, tmp_path: Path
) -> None:
    work = project(tmp_path)
    first = turns(tool("list_dir", path="src"), [("text", "Listed.")])
    with openai_stream(first) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "what is in src?", "--session", "keep-1"], work)
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "home/.local/share/flux7/agent/sessions/keep-1.json").read_text())
    assert saved["mesh_session_id"] == "keep-1" and [m["role"] for m in saved["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [c["tool"] for c in saved["tool_calls"]] == ["list_dir"] and saved["tool_calls"][0]["trace_id"]

    second = turns(tool("read_file", path="src/app.py"), [("text", "Read.")])
    with openai_stream(second) as llm:
        again = run_agent(mesh, tmp_path, llm.url, ["--continue", "-p", "and app.py?"], work)
        resumed = run_agent(mesh, tmp_path, llm.url, ["--resume", "keep-1"], work, stdin="/session\nthanks\n")
        switched = run_agent(
            mesh, tmp_path, llm.url, ["--session", "other-1"], work, stdin="/resume keep\n/model fake-2\nlast one\n"
        )
    assert switched.returncode == 0, switched.stderr
    assert "resumed keep-1 (" in switched.stdout and "model: openai:fake-2" in switched.stdout
    assert llm.bodies[-1]["model"] == "fake-2"
    assert [m.get("content") for m in llm.bodies[-1]["messages"] if m["role"] == "user"] == [
        "what is in src?",
        "and app.py?",
        "thanks",
        "last one",
    ]
    assert again.returncode == 0, again.stderr
    assert resumed.returncode == 0, resumed.stderr
    # The model saw the first run's exchange before the new prompt.
    texts = [m.get("content") for m in llm.bodies[0]["messages"] if m["role"] == "user"]
    assert texts == ["what is in src?", "and app.py?"]
    assert "keep-1" in resumed.stdout and "(resumed)" in resumed.stderr
    rows = session_rows(mesh, "keep-1")
    assert [(r["tool"], r["policy"]) for r in rows] == [
        ("list_dir", "allow"),
        ("read_file", "allow"),  # --continue
        ("read_file", "allow"),  # --resume keep-1
        ("read_file", "allow"),  # /resume keep (a unique prefix) in another session's REPL
    ]
    assert session_rows(mesh, "other-1") == []
    assert saved["tool_calls"][0]["trace_id"] == rows[0]["trace_id"]


def test_without_a_mesh_changes_are_refused_unless_offline_was_chosen(tmp_path: Path) -> None:
    work = project(tmp_path)
    script = turns(tool("write_file", path="new.txt", content="x"), tool("read_file", path="src/app.py"), [])
    dead = "http://127.0.0.1:9"
    with openai_stream(script) as llm:
        closed = agent_cli(
            ["--mesh", dead, "-p", "write", "--mode", "yolo"],
            llm.url,
            tmp_path / "h1",
            cwd=work,
            extra_env=openai_env(),
        )
        assert closed.returncode == 0, closed.stderr
        assert not (work / "new.txt").exists()
        refused, read = last_tool_results(llm.bodies[1])[0], last_tool_results(llm.bodies[2])[0]
        assert refused.startswith("refused: the mesh cannot be asked") and "(fail closed)" in refused
        assert "GREETING = 'hello'" in read  # a read still runs, shown as ungoverned
        assert "← local ungoverned" in closed.stderr
        offline = agent_cli(
            ["--mesh", dead, "-p", "write", "--mode", "yolo", "--offline"],
            llm.url,
            tmp_path / "h2",
            cwd=work,
            extra_env=openai_env(),
        )
    assert offline.returncode == 0, offline.stderr
    assert "OFFLINE: tool calls are NOT governed" in offline.stderr.splitlines()[0]
    assert (work / "new.txt").read_text() == "x"


def test_on_request_asks_and_a_no_at_the_terminal_runs_nothing(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    script = turns(tool("shell", command="touch made.txt"), tool("shell", command="git status"), [])
    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["--session", "ask-1"], work, stdin="make it\nn\n")
    assert done.returncode == 0, done.stderr
    assert not (work / "made.txt").exists()
    assert "? shell needs your confirmation" in done.stderr
    assert last_tool_results(llm.bodies[1])[0].startswith("refused: the user did not confirm it")
    # The declined call stopped at the local gate; the whitelisted `git status` ran without asking.
    assert [(r["tool"], r["params"]["command"]) for r in session_rows(mesh, "ask-1")] == [("shell", "git status")]


def test_configuration_layers_and_one_line_errors(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    home = tmp_path / "home"
    (home / ".config" / "flux7").mkdir(parents=True)
    (home / ".config" / "flux7" / "agent.toml").write_text('model = "user-model"\ntemperature = 0.5\n')
    (home / ".config" / "flux7" / "AGENT.md").write_text("Answer in English.")
    (work / ".flux7").mkdir()
    project_toml = work / ".flux7" / "agent.toml"
    project_toml.write_text('model = "project-model"\n[mesh]\nagent_id = "proj-agent"\n')
    (work / "AGENT.md").write_text("Tests live in tests/.")
    env = {"FLUX7_LLM_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test"}
    with openai_stream(turns(tool("list_dir"), [])) as llm:
        args = ["--mesh", mesh.url, "-p", "hi", "--session", "cfg-1", "--trust"]  # the project's agent_id needs trust
        ok = agent_cli(args, llm.url, home, cwd=work, extra_env=env)
        assert ok.returncode == 0, ok.stderr
        body = llm.bodies[0]
        assert body["model"] == "project-model" and body["temperature"] == 0.5  # project over user, user over default
        system = body["messages"][0]["content"]
        assert "Answer in English." in system and "Tests live in tests/." in system
        assert [(r["agent_id"], r["tool"]) for r in session_rows(mesh, "cfg-1")] == [("proj-agent", "list_dir")]

        bad = {
            "temperature = 3\n": f"{project_toml}: temperature must be between 0 and 2 (got 3)",
            'approval_mode = "sometimes"\n': f"{project_toml}: approval_mode must be one of read-only, always-ask, "
            "on-request, auto-edit, auto, yolo (got 'sometimes')",
            "temprature = 1\n": f"{project_toml}: unknown key 'temprature'",
            '[[mcp_servers]]\nname = "fs"\ncommand = "x"\nurl = "http://h"\n': f"{project_toml}: mcp_servers[0] (fs) "
            "needs exactly one of command or url",
            '[[hooks]]\nevent = "before_tool"\n': f"{project_toml}: hooks[0] (before_tool) needs a command or a script",
            "model = \n": f"{project_toml}: not valid TOML: ",
        }
        for text, message in bad.items():
            project_toml.write_text(text)
            failed = agent_cli(
                ["--mesh", mesh.url, "-p", "hi", "--session", "cfg-2"], llm.url, home, cwd=work, extra_env=env
            )
            assert failed.returncode == 2, text
            assert failed.stderr.startswith(f"flux7 agent: config error: {message}"), failed.stderr
            assert len(failed.stderr.strip().splitlines()) == 1
        project_toml.write_text("")
        no_key = agent_cli(
            ["--mesh", mesh.url, "-p", "hi"],
            llm.url,
            home,
            cwd=work,
            extra_env={"FLUX7_LLM_PROVIDER": "openai", "FLUX7_LLM_URL": ""},
        )
    assert no_key.returncode == 2
    assert (
        no_key.stderr.strip()
        == "flux7 agent: config error: no API key for openai: set OPENAI_API_KEY (or FLUX7_LLM_API_KEY)"
    )
    no_provider = agent_cli(
        ["--mesh", mesh.url, "-p", "hi"],
        llm.url,
        home,
        cwd=work,
        extra_env={"FLUX7_LLM_PROVIDER": "", "FLUX7_LLM_URL": "", "ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""},
    )
    assert no_provider.returncode == 2  # no quiet fall-back to an Ollama that is not there
    assert no_provider.stderr.startswith("flux7 agent: config error: no model provider: pass --provider")
    assert len(llm.bodies) == 2  # the good run's two turns: no bad configuration reached the model
    assert session_rows(mesh, "cfg-2") == []  # nor the mesh


HOOK = """
import json, os, sys
event = json.load(sys.stdin)
with open(os.environ["HOOK_LOG"], "a") as log:
    log.write(json.dumps(event) + "\\n")
if event["event"] == "before_tool" and "deploy" in event["arguments"].get("command", ""):
    print("deploys go through CI", file=sys.stderr)
    sys.exit(2)
"""


def test_hooks_see_each_event_and_a_before_tool_hook_blocks_a_call(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    log = tmp_path / "hooks.jsonl"
    (tmp_path / "hook.py").write_text(HOOK)
    command = f"{sys.executable} {tmp_path / 'hook.py'}"
    events = ["session_start", "user_prompt", "before_tool", "after_tool", "agent_end"]
    (work / ".flux7").mkdir()
    (work / ".flux7" / "agent.toml").write_text(
        "".join(f'[[hooks]]\nevent = "{e}"\ncommand = "{command}"\n' for e in events)
    )
    script = turns(tool("shell", command="./deploy.sh prod"), tool("shell", command="echo built"), [])
    with openai_stream(script) as llm:
        done = agent_cli(
            ["--mesh", mesh.url, "-p", "ship it", "--mode", "auto", "--session", "hooks-1", "--trust"],
            llm.url,
            tmp_path / "home",
            cwd=work,
            extra_env={**openai_env(), "HOOK_LOG": str(log)},
        )
    assert done.returncode == 0, done.stderr
    assert last_tool_results(llm.bodies[1]) == ["refused by a before_tool hook: deploys go through CI"]
    assert "← hook refused" in done.stderr
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["event"], e.get("tool"), e.get("policy")) for e in seen] == [
        ("session_start", None, None),
        ("user_prompt", None, None),
        ("before_tool", "shell", None),
        ("after_tool", "shell", "refused"),
        ("before_tool", "shell", None),
        ("after_tool", "shell", "allow"),
        ("agent_end", None, None),
    ]
    assert seen[1]["prompt"] == "ship it" and seen[0]["session_id"] == "hooks-1" and seen[0]["cwd"] == str(work)
    assert seen[5]["exit_code"] == 0 and seen[5]["result"] == "exit code 0\nbuilt\n"
    # The blocked call reached neither gate: the mesh traced only the one that ran, with the trace id hooks saw.
    rows = session_rows(mesh, "hooks-1")
    assert [(r["tool"], r["params"]["command"]) for r in rows] == [("shell", "echo built")]
    assert seen[5]["trace_id"] == rows[0]["trace_id"]


WORD_COUNT = """
DESCRIPTION = "Count the words of a file."
PARAMETERS = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
MUTATING = False

def run(arguments, cwd):
    return str(len((cwd / arguments["path"]).read_text().split()))
"""

STAMP = """
NAME = "stamp"
DESCRIPTION = "Write a stamp file."
PARAMETERS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

async def run(arguments, cwd):
    (cwd / "STAMP").write_text(arguments["text"])
    return "stamped"
"""


def test_custom_tools_from_the_user_and_a_trusted_project_pass_both_gates(mesh: Server, tmp_path: Path) -> None:
    """The project's tools load only in a folder the user trusted (and not when the user's own
    `tools.trust_project = false` says never)."""
    work = project(tmp_path)
    home = tmp_path / "home"
    (home / ".config" / "flux7" / "tools").mkdir(parents=True)
    (home / ".config" / "flux7" / "tools" / "word_count.py").write_text(WORD_COUNT)
    (work / ".flux7" / "tools").mkdir(parents=True)
    (work / ".flux7" / "tools" / "stamp.py").write_text(STAMP)
    script = turns(tool("word_count", path="src/app.py"), tool("stamp", text="v1"), [])

    def offered(body: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] for t in body["tools"]]

    with openai_stream(script) as llm:
        (home / ".config" / "flux7" / "agent.toml").write_text("[tools]\ntrust_project = true\n")
        untrusted = run_agent(mesh, tmp_path, llm.url, ["-p", "count", "--session", "custom-1"], work)
        assert untrusted.returncode == 0, untrusted.stderr
        assert "word_count" in offered(llm.bodies[0]) and "stamp" not in offered(llm.bodies[0])  # not trusted
        assert f"{work / '.flux7' / 'tools'} (custom tools: importing them runs their code)" in untrusted.stderr
        args = ["-p", "count", "--session", "custom-2", "--mode", "auto", "--trust"]
        trusted = run_agent(mesh, tmp_path, llm.url, args, work)
        assert trusted.returncode == 0, trusted.stderr
        assert "note: custom tools: word_count, stamp" in trusted.stderr
        assert last_tool_results(llm.bodies[-2]) == ["6"] and last_tool_results(llm.bodies[-1]) == ["stamped"]
        assert (work / "STAMP").read_text() == "v1"
        # The user's own config can say never, even in a trusted folder.
        user_toml = home / ".config" / "flux7" / "agent.toml"
        user_toml.write_text(user_toml.read_text().replace("trust_project = true", "trust_project = false"))
        never = run_agent(mesh, tmp_path, llm.url, ["-p", "count", "--session", "custom-3"], work)
        assert never.returncode == 0, never.stderr
        assert "stamp" not in offered(llm.bodies[-1]) and "custom tools: word_count\n" in never.stderr
        # A project cannot trust itself, and a broken tool stops the agent at start with one line.
        (work / ".flux7" / "agent.toml").write_text("[tools]\ntrust_project = true\n")
        self_trusted = run_agent(mesh, tmp_path, llm.url, ["-p", "x"], work)
        (work / ".flux7" / "agent.toml").write_text(f'[projects."{work}"]\ntrust_level = "trusted"\n')
        self_trusted_too = run_agent(mesh, tmp_path, llm.url, ["-p", "x"], work)
        (work / ".flux7" / "agent.toml").unlink()
        user_toml.write_text(user_toml.read_text().replace("trust_project = false", "trust_project = true"))
        broken_tool = "DESCRIPTION = 'no run'\nPARAMETERS = {'type': 'object'}\n"
        (work / ".flux7" / "tools" / "broken.py").write_text(broken_tool)
        broken = run_agent(mesh, tmp_path, llm.url, ["-p", "x"], work)
    assert self_trusted.returncode == 2
    assert "tools.trust_project can only be set in the user's own" in self_trusted.stderr
    assert self_trusted_too.returncode == 2 and "projects can only be set in the user's own" in self_trusted_too.stderr
    assert broken.returncode == 2
    assert broken.stderr.strip() == (
        f"flux7 agent: config error: custom tool {work / '.flux7/tools/broken.py'}: it must define run(arguments, cwd)"
    )
    assert [(r["tool"], r["policy"]) for r in session_rows(mesh, "custom-1")] == [("word_count", "allow")]
    rows = session_rows(mesh, "custom-2")
    assert [(r["tool"], r["policy"], r["params"]) for r in rows] == [
        ("word_count", "allow", {"path": "src/app.py"}),
        ("stamp", "allow", {"text": "v1"}),
    ]
    assert all(r["revision"] == 1 for r in rows)  # each completed by its outcome


def test_a_sub_agent_works_under_its_own_id_with_a_narrowed_tool_set(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)

    def script(body: dict[str, Any]) -> list[Step]:
        messages = body["messages"]
        if messages[0]["content"].startswith("You are explorer, a sub-agent"):
            offered = sorted(t["function"]["name"] for t in body["tools"])
            assert offered == ["grep", "read_file"], offered  # what the parent gave it, nothing else
            done = last_tool_results(body)
            if not done:
                return tool("grep", pattern="GREETING =")
            if len(done) == 1 and done[0].startswith("src/"):
                return tool("read_file", path="src/app.py")
            return [("text", "Found it in src/app.py:1; reading the file was refused: " + done[0][:18])]
        if not last_tool_results(body):
            return tool("task", name="explorer", prompt="Where is GREETING set?", tools=["grep", "read_file"])
        return [("text", "The explorer says: " + last_tool_results(body)[0])]

    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "find GREETING", "--session", "sub-1"], work)
    assert done.returncode == 0, done.stderr
    assert "→ explorer/grep" in done.stderr and "← deny" in done.stderr
    final = last_tool_results(llm.bodies[-1])[0]
    assert final == "Found it in src/app.py:1; reading the file was refused: refused by policy:"
    rows = session_rows(mesh, "sub-1")
    assert [(r["agent_id"], r["tool"], r["policy"]) for r in rows] == [
        ("flux7-agent", "task", "allow"),
        ("flux7-agent/explorer", "grep", "allow"),
        ("flux7-agent/explorer", "read_file", "deny"),  # the parent may read; its sub-agent may not
    ]
    assert rows[0]["params"]["name"] == "explorer" and rows[0]["revision"] == 1  # the task's outcome, reported


def test_an_mcp_server_from_the_config_is_governed_call_by_call(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    (work / ".flux7").mkdir()
    (work / ".flux7" / "agent.toml").write_text(
        "[[mcp_servers]]\n"
        'name = "echo"\n'
        f"command = {json.dumps(sys.executable)}\n"
        'args = ["-m", "tests.upstreams.servers.mcp_echo"]\n'
        f"env = {{ PYTHONPATH = {json.dumps(str(REPO))} }}\n"
    )
    script = turns(
        tool("echo_read_file", path="src/app.py"),
        tool("echo_echo", text="over MCP"),
        tool("echo_write_file", path="src/app.py", content="gone"),
        [],
    )
    with openai_stream(script) as llm:
        args = ["-p", "use echo", "--session", "mcp-1", "--mode", "auto-edit", "--trust"]
        done = run_agent(mesh, tmp_path, llm.url, args, work)
    assert done.returncode == 0, done.stderr
    assert "note: MCP tools: echo.echo, echo.read_file, echo.write_file" in done.stderr
    offered = [t["function"]["name"] for t in llm.bodies[0]["tools"]]
    assert {"echo_echo", "echo_read_file", "echo_write_file"} <= set(offered)
    results = [last_tool_results(b)[0] for b in llm.bodies[1:]]
    assert results[0].startswith("GREETING = 'hello'") and results[1] == "over MCP"
    assert results[2].startswith("refused by policy:")
    assert (work / "src" / "app.py").read_text().startswith("GREETING = 'hello'")  # the denied write never ran
    rows = session_rows(mesh, "mcp-1")
    assert [(r["tool"], r["policy"], r["status_code"]) for r in rows] == [
        ("echo.read_file", "allow", 200),
        ("echo.echo", "allow", 200),
        ("echo.write_file", "deny", 403),
    ]
    assert rows[1]["params"] == {"text": "over MCP"} and rows[1]["revision"] == 1


def test_web_fetch_runs_only_on_the_mesh_s_allow(mesh: Server, tmp_path: Path) -> None:
    work = project(tmp_path)
    hits: list[str] = []

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b"<html><script>track()</script><h1>Hello &amp; welcome</h1><p>to the docs</p></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    page = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=page.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{page.server_address[1]}/docs"
    # A loopback page: web_fetch reaches it only because the user's config allows its address and port.
    (tmp_path / "home" / ".config" / "flux7").mkdir(parents=True)
    allow = f'[web_fetch]\nallow = ["127.0.0.1:{page.server_address[1]}"]\n'
    (tmp_path / "home" / ".config" / "flux7" / "agent.toml").write_text(allow)
    try:
        with openai_stream(turns(tool("web_fetch", url=url), [])) as llm:
            done = run_agent(mesh, tmp_path, llm.url, ["-p", "read the docs", "--session", "web-1"], work)
            offline = run_agent(mesh, tmp_path, llm.url, ["-p", "read the docs", "--offline"], work)
    finally:
        page.shutdown()
        page.server_close()
    assert done.returncode == 0, done.stderr
    assert last_tool_results(llm.bodies[1]) == ["HTTP 200 text/html; charset=utf-8\nHello & welcome to the docs"]
    assert [(r["tool"], r["policy"], r["params"]) for r in session_rows(mesh, "web-1")] == [
        ("web_fetch", "allow", {"url": url})
    ]
    assert offline.returncode == 0, offline.stderr
    assert last_tool_results(llm.bodies[3])[0].startswith("refused: web_fetch runs only when the mesh allows it")
    assert hits == ["/docs"]  # fetched once: with the mesh's allow, never offline
