"""Issue 34, `flux7 agent` as a daily driver: one test (or more) per row of the feature table that was broken or
missing. The broken rows' tests fail on the code before the fix. Each drives the agent as a user does (the CLI as
a subprocess, or `Agent.run` in process) against a scripted streaming model on loopback and the real mesh, and
checks what happened on disk, on the wire and in the mesh's trail. (Row 1, Ctrl-C, is at a real terminal in
test_pty.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.functions.app import create_app
from flux7.shared.agent.agent import Agent, Question, Workspace
from flux7.shared.agent.builtin_tools import BUILTINS, ToolContext
from flux7.shared.agent.checkpoints import UndoRefused
from flux7.shared.agent.config import agent_md_files
from flux7.shared.agent.context import SUMMARY_PROMPT, ContextEngine
from flux7.shared.agent.cost import Prices
from flux7.shared.agent.llm import make_chat
from flux7.shared.agent.mesh_tools import MeshTools
from flux7.shared.agent.permissions import Permissions, parse_rule
from flux7.shared.agent.sandbox import Sandbox, find_bwrap
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.agent.llm_stream_servers import anthropic_stream, last_tool_results, openai_stream
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
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server, running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

Steps = list[tuple[str, ...]]


def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "home/.local/share/flux7/agent/sessions"


def estimate(body: dict[str, Any]) -> int:
    """The request's size as the agent estimates it: four characters a token over what is sent."""
    chars = len(json.dumps(body.get("tools") or []))
    for m in body["messages"]:
        chars += len(str(m.get("content") or ""))
        chars += sum(len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in m.get("tool_calls") or [])
    return chars // 4


# Row 2 and row 7: a session killed while a call waited (here, for a human's approval in the mesh).


def _killed_while_held(server: Server, tmp_path: Path, work: Path, session: str) -> str:
    """Start `-p` with an edit the mesh holds for approval, kill -9 the agent while it waits; the approval id."""
    script = turns(tool("edit_file", path="release/notes.md", old_text="1", new_text="2"), [("text", "Edited.")])
    with openai_stream(script) as llm:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flux7.functions.entry",
                "agent",
                "--mesh",
                server.url,
                "-p",
                "bump",
                "--mode",
                "auto",
                "--session",
                session,
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
                    for a in httpx.get(f"{server.url}/approvals", params={"status": "pending"}, trust_env=False).json()
                    if a["tool"] == "edit_file" and a.get("session_id", session) == session
                ],
                timeout=30,
                what="the edit held for approval",
            )
            saved = sessions_dir(tmp_path) / f"{session}.json"
            wait_until(lambda: saved.exists() and "tool_calls" in saved.read_text(), timeout=30)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return str(held[0]["id"])


def _release_project(tmp_path: Path) -> Path:
    work = project(tmp_path)
    (work / "release").mkdir()
    (work / "release" / "notes.md").write_text("version 1\n")
    return work


def test_a_session_killed_while_a_call_was_pending_resumes_with_the_call_answered_as_not_run(
    mesh: Server,  # noqa: F811
    tmp_path: Path,
) -> None:
    work = _release_project(tmp_path)
    approval = _killed_while_held(mesh, tmp_path, work, "killed-1")
    httpx.post(f"{mesh.url}/approvals/{approval}/deny", json={"resolved_by": "ops"}, trust_env=False)
    with openai_stream(turns([("text", "Carrying on.")])) as llm:
        resumed = run_agent(mesh, tmp_path, llm.url, ["--continue", "-p", "go on"], work)
    assert resumed.returncode == 0, resumed.stderr  # the provider accepted the conversation (no HTTP 400)
    assert "Carrying on." in resumed.stdout
    messages = llm.bodies[0]["messages"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "tool", "user"]
    assert messages[3]["content"].startswith("not run: the agent stopped before this call was answered")


def test_an_approval_given_after_the_agent_died_is_recorded_as_not_run(
    mesh: Server,  # noqa: F811
    tmp_path: Path,
) -> None:
    work = _release_project(tmp_path)
    approval = _killed_while_held(mesh, tmp_path, work, "killed-2")
    released = httpx.post(f"{mesh.url}/approvals/{approval}/approve", json={"resolved_by": "ops"}, trust_env=False)
    assert released.status_code == 200
    before = [r for r in session_rows(mesh, "killed-2") if r["tool"] == "edit_file"]
    assert [(r["approval_status"], r["status_code"]) for r in before] == [("approved", 200)]  # reads as done
    with openai_stream(turns([("text", "Hello.")])) as llm:
        started = run_agent(mesh, tmp_path, llm.url, ["-p", "hello", "--session", "later-1"], work)
    assert started.returncode == 0, started.stderr
    assert "told the mesh that 1 call(s) it released never ran" in started.stderr
    rows = [r for r in session_rows(mesh, "killed-2") if r["tool"] == "edit_file"]
    assert [(r["approval_status"], r["status_code"], r["error"]) for r in rows] == [
        ("approved", 500, "not run: the agent stopped")
    ]
    assert (work / "release" / "notes.md").read_text() == "version 1\n"  # indeed never ran
    assert not list((sessions_dir(tmp_path) / "asked").glob("*.json"))  # nothing left to report


# Row 3: a stream cut before its end.


def _cut_first_then(answer: str) -> Any:
    asked: list[int] = []

    def script(_body: dict[str, Any]) -> Steps:
        asked.append(1)
        return [("cut",)] if len(asked) == 1 else [("text", answer)]

    return script


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_before_anything_was_shown_is_asked_again_once_and_said(tmp_path: Path, provider: str) -> None:
    serve = openai_stream if provider == "openai" else anthropic_stream
    with serve(_cut_first_then("Whole answer.")) as llm:
        extra = openai_env() if provider == "openai" else {"FLUX7_LLM_MODEL": "claude-x"}
        done = agent_cli(["-p", "hi", "--offline", "--plain"], llm.url, tmp_path / "home", extra_env=extra)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Whole answer." and len(llm.bodies) == 2
    assert "note: the model could not answer (the model's stream ended before it answered" in done.stderr


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_after_text_was_shown_is_an_error_and_exits_non_zero(tmp_path: Path, provider: str) -> None:
    serve = openai_stream if provider == "openai" else anthropic_stream
    with serve(lambda _b: [("text", "The first half of"), ("cut",)]) as llm:
        extra = openai_env() if provider == "openai" else {"FLUX7_LLM_MODEL": "claude-x"}
        home = tmp_path / "home"
        done = agent_cli(["-p", "hi", "--offline", "--plain", "--session", "cut-1"], llm.url, home, extra_env=extra)
    assert done.returncode == 1
    assert "error: the model's answer was cut off before it ended" in done.stderr
    assert len(llm.bodies) == 1  # a half-shown answer is not asked for again
    saved = json.loads((sessions_dir(tmp_path) / "cut-1.json").read_text())
    assert saved["messages"] == []  # the cut answer did not enter the conversation


# Row 4: one prompt that outgrows the window.


async def test_one_long_prompt_is_compacted_so_every_request_fits_the_window(tmp_path: Path, backend: Backend) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.log").write_text("".join(f"{name} line {i}: {'x' * 60}\n" for i in range(600)))

    def script(body: dict[str, Any]) -> Steps:
        messages = body["messages"]
        if messages[0]["content"] == SUMMARY_PROMPT:
            return [("text", "SUMMARY: read a.log (600 lines of x) and b.log.")]
        results = last_tool_results(body)
        last = results[0].split("\t", 1)[1][0] if results else ""  # the log just read: a, b or c
        if last != "c":
            return tool("read_file", path=f"{'abc'['abc'.index(last) + 1 if last else 0]}.log")
        return [("text", "Read all three logs.")]

    with openai_stream(script) as llm:
        governed = Mesh(load_settings(pets_mesh_config(tmp_path, backend, POLICY), env={}))
        async with _mesh_transport(governed) as (transport, _):
            chat = make_chat("openai", "m", url=llm.url, api_key="sk-test", backoff=0)
            agent = Agent(
                chat,
                MeshTools("http://mesh", "coder", session_id="long-1", transport=transport),
                workspace=Workspace(work, tmp_path, mode="auto"),
                context=ContextEngine(window=2000, compact_at=0.8),
            )
            events = [e async for e in agent.run("Read a.log, b.log and c.log")]
    assert events[-1].type == "agent_end", events[-1].text
    turns_sent = [b for b in llm.bodies if b["messages"][0]["content"] != SUMMARY_PROMPT]
    assert len(turns_sent) == 4
    sizes = [estimate(b) for b in turns_sent]
    assert max(sizes) <= 2000, sizes  # every request fits (before the fix the second was ~4 times the window)
    assert any(e.type == "notice" and e.text.startswith("context compacted") for e in events)
    assert turns_sent[-1]["messages"][1]["content"].startswith("Read a.log, b.log and c.log")  # the task stays


# Row 5: a command's output.


async def test_a_command_s_output_streams_as_it_comes_and_is_kept_as_head_and_tail(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    bwrap = find_bwrap()
    ws = Workspace(work, tmp_path, mode="auto", sandbox=Sandbox(bwrap), tools=ToolContext(output_limit=30_000))
    assert bwrap and not await Sandbox(bwrap).probe(), "the sandbox does not start here"
    size = 100_000_000
    calls = [("shell", {"command": f"head -c {size} /dev/zero | tr '\\0' 'x'; echo; echo the end"})]

    def script(body: dict[str, Any]) -> Steps:
        if not last_tool_results(body):
            return tool(*calls[0][:1], **calls[0][1])
        return [("text", "ok")]

    with openai_stream(script) as llm:
        chat = make_chat("openai", "m", url=llm.url, api_key="sk-test", backoff=0)
        ws.offline = True
        agent = Agent(chat, MeshTools("http://127.0.0.1:9", "x"), workspace=ws)
        shown = 0
        chunks = 0
        tracemalloc.start()
        try:
            async for event in agent.run("make noise"):
                if event.type == "tool_call_output":
                    shown += len(event.text)
                    chunks += 1
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert shown == size + len("\nthe end\n") and chunks > 100  # all of it reached the screen, piece by piece
    assert peak < 20_000_000, peak  # the agent held a bounded part of it, not 100 MB
    result = last_tool_results(llm.bodies[1])[0]
    assert result.startswith("exit code 0\nxxxx") and result.endswith("xxxx\nthe end\n")
    assert f"[... {size + 9 - 30_000:,} characters of output cut here ({size + 9:,} in all)" in result
    assert len(result) < 31_000


def test_the_terminal_shows_a_command_s_whole_output_and_a_result_s_first_lines(mesh: Server, tmp_path: Path) -> None:  # noqa: F811
    work = project(tmp_path)
    script = turns(
        tool("shell", command="printf 'collected 3 items\\ntest_a PASSED\\ntest_b FAILED\\n3 passed, 1 failed\\n'"),
        tool("read_file", path="src/app.py"),
        [("text", "Done.")],
    )
    with openai_stream(script) as llm:
        done = run_agent(mesh, tmp_path, llm.url, ["-p", "test", "--mode", "auto", "--plain"], work)
    assert done.returncode == 0, done.stderr
    assert "collected 3 items\ntest_a PASSED\ntest_b FAILED\n3 passed, 1 failed\n" in done.stderr
    assert "     1\tGREETING = 'hello'\n       2\t\n" in done.stderr  # a result's first lines, not only its first


# Row 6: line endings and encodings.


async def test_edit_file_keeps_crlf_line_endings_and_the_file_s_encoding(tmp_path: Path) -> None:
    ctx = ToolContext()
    (tmp_path / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\nfour\r\n")
    edited = await BUILTINS["edit_file"].run({"path": "win.txt", "old_text": "two", "new_text": "2"}, tmp_path, ctx)
    assert not edited.is_error, edited.content
    assert (tmp_path / "win.txt").read_bytes() == b"one\r\n2\r\nthree\r\nfour\r\n"
    changed = [line for line in edited.diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-two", "+2"] and "\r" not in edited.diff  # the diff shows the one line that changed
    # The model writes newlines: a multi-line edit of a CRLF file matches, and writes CRLF.
    multi = {"path": "win.txt", "old_text": "three\nfour\n", "new_text": "3\n4\n5\n"}
    assert not (await BUILTINS["edit_file"].run(multi, tmp_path, ctx)).is_error
    assert (tmp_path / "win.txt").read_bytes() == b"one\r\n2\r\n3\r\n4\r\n5\r\n"
    (tmp_path / "latin.txt").write_bytes("café = 1\nthé = 2\n".encode("latin-1"))
    latin = {"path": "latin.txt", "old_text": "= 2", "new_text": "= 3"}
    assert not (await BUILTINS["edit_file"].run(latin, tmp_path, ctx)).is_error
    assert (tmp_path / "latin.txt").read_bytes() == "café = 1\nthé = 3\n".encode("latin-1")
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfkey = old\r\n")
    bom = {"path": "bom.txt", "old_text": "old", "new_text": "new"}
    assert not (await BUILTINS["edit_file"].run(bom, tmp_path, ctx)).is_error
    assert (tmp_path / "bom.txt").read_bytes() == b"\xef\xbb\xbfkey = new\r\n"
    rewrite = {"path": "win.txt", "content": "a\nb\n"}  # a whole new content keeps the file's line endings
    assert not (await BUILTINS["write_file"].run(rewrite, tmp_path, ctx)).is_error
    assert (tmp_path / "win.txt").read_bytes() == b"a\r\nb\r\n"


# Row 8: the small things.


def test_config_shows_each_value_and_the_flag_that_set_it(tmp_path: Path) -> None:
    with openai_stream(lambda _b: [("text", "hi")]) as llm:
        done = agent_cli(
            ["--mesh", "http://127.0.0.1:9", "--mode", "auto", "--offline", "--llm-timeout", "30"],
            llm.url,
            tmp_path / "home",
            stdin="/config\n",
            extra_env=openai_env(),
        )
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert lines["mesh.url"].split()[1:] == ["http://127.0.0.1:9", "flag", "--mesh"]
    assert lines["approval_mode"].split()[1:] == ["auto", "flag", "--mode"]
    assert lines["llm_timeout"].split()[1:] == ["30.0", "flag", "--llm-timeout"]
    assert lines["mesh.agent_id"].split()[1:] == ["flux7-agent", "default"]
    assert "sk-test" not in done.stdout and "****test" in done.stdout  # the key is masked
    assert "flag --url" not in done.stdout and "flag --approval-mode" not in done.stdout


def test_json_tool_call_deltas_carry_the_call_id(tmp_path: Path) -> None:
    script = turns(tool("list_dir", path="."), [("text", "ok")])
    with openai_stream(script) as llm:
        done = agent_cli(["-p", "ls", "--offline", "--json"], llm.url, tmp_path / "home", extra_env=openai_env())
    events = [json.loads(line) for line in done.stdout.splitlines()]
    deltas = [e for e in events if e["type"] == "tool_call_delta"]
    started = next(e for e in events if e["type"] == "tool_call_streaming")
    assert deltas and {d["call_id"] for d in deltas} == {started["call_id"]} == {"call_0"}


def test_plain_output_says_each_word_once(tmp_path: Path) -> None:
    script = turns(tool("list_dir", path="."), [("tool", "list_dir", "not json")], [("text", "ok")])
    with openai_stream(script) as llm:
        done = agent_cli(["-p", "ls", "--offline", "--plain"], llm.url, tmp_path / "home", extra_env=openai_env())
    assert done.returncode == 0, done.stderr
    assert "← offline: " in done.stderr and "offline offline" not in done.stderr
    assert "← error: the arguments must be a JSON object" in done.stderr and "error: error:" not in done.stderr


def test_a_silent_model_times_out_after_llm_timeout_with_a_sentence_saying_so(tmp_path: Path) -> None:
    with openai_stream(lambda _b: [("hold",)]) as llm:
        done = agent_cli(
            ["-p", "hi", "--offline", "--plain", "--llm-timeout", "1"],
            llm.url,
            tmp_path / "home",
            extra_env=openai_env(),
        )
    assert done.returncode == 1
    assert "the model did not answer within 1 s (ReadTimeout; the llm_timeout setting changes it)" in done.stderr


def test_retries_are_announced_before_they_happen(tmp_path: Path) -> None:
    with openai_stream(lambda _b: [("text", "fine")]) as llm:
        llm.fail += [503]
        done = agent_cli(["-p", "hi", "--offline", "--plain"], llm.url, tmp_path / "home", extra_env=openai_env())
    assert done.returncode == 0, done.stderr
    assert "note: the model could not answer (HTTP 503: " in done.stderr
    assert "asking again in 1 s (attempt 2 of 4)" in done.stderr


def test_a_held_call_says_how_to_approve_it_with_the_default_admin_token(tmp_path: Path, backend: Backend) -> None:
    script = turns(tool("write_file", path="notes.txt", content="x"), [("text", "ok")])
    policy = 'name: p\nagent: "*"\nrules:\n  - tools: ["write_file"]\n    action: human_approval\n'
    with openai_stream(script) as llm, running_server(pets_mesh_config(tmp_path, backend, policy)) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flux7.functions.entry",
                "agent",
                "--mesh",
                server.url,
                "-p",
                "w",
                "--plain",
                "--mode",
                "auto",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=agent_env(llm.url, tmp_path / "home", openai_env()),
            cwd=tmp_path,
        )
        lines: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        try:
            waiting = wait_until(lambda: [line for line in lines if line.startswith("… ")], timeout=30)
            admin = {"Authorization": "Bearer adm1n"}
            held = httpx.get(f"{server.url}/approvals", headers=admin, trust_env=False).json()
            httpx.post(f"{server.url}/approvals/{held[0]['id']}/deny", headers=admin, trust_env=False)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(5)
    assert f"{server.url}/console/#/approvals" in waiting[0] and "mesh approve" in waiting[0]


def test_agent_help_and_usage_errors_read_like_every_flux7_command(tmp_path: Path) -> None:
    def flux7(*args: str) -> subprocess.CompletedProcess[str]:
        return agent_cli(list(args), "http://127.0.0.1:9", tmp_path / "home")

    helped = flux7("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: flux7 agent [OPTIONS]")
    for flag in ("-p, --prompt", "--resume [ID]", "-c, --continue", "--mode", "--json", "--plain", "--trust"):
        assert flag in helped.stdout
    wrong = flux7("--bogus")
    assert wrong.returncode == 2
    assert wrong.stderr == "flux7 agent: no such option '--bogus'\nRun 'flux7 agent --help' for usage.\n"
    bad_mode = flux7("--mode", "sometimes")
    assert bad_mode.returncode == 2 and bad_mode.stderr.startswith("flux7 agent: 'sometimes' is not one of 'read-only'")


# Row 9: the diff before an edit is approved, at the terminal and in the mesh.


@asynccontextmanager
async def _mesh_transport(governed: Mesh) -> AsyncIterator[tuple[httpx.ASGITransport, list[dict[str, Any]]]]:
    """The mesh's app in process, behind a recorder of the `/decide` bodies it receives."""
    app = create_app(governed)
    decided: list[dict[str, Any]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/decide":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        decided.append(json.loads(b"".join(chunks)))
        replay = iter([{"type": "http.request", "body": b"".join(chunks), "more_body": False}])

        async def again() -> Any:
            return next(replay, None) or await receive()

        await app(scope, again, send)

    await governed.start()
    try:
        yield httpx.ASGITransport(app=recording, client=("127.0.0.1", 5000)), decided
    finally:
        await governed.stop()


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
    assert len(second["diff"].encode()) <= 64 * 1024 and "[... diff truncated: " in second["diff"]
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
        from flux7.shared.agent.sessions import Session, SessionStore

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
