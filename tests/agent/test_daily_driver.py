"""Issue 34, `flux7 agent` as a daily driver: one test (or more) per row of the feature table that was broken;
each fails on the code before the fix (the missing rows are test_daily_driver_features.py's). Each drives the
agent as a user does (the CLI as a subprocess, or `Agent.run` in process) against a scripted streaming model on
loopback and the real mesh, and checks what happened on disk, on the wire and in the mesh's trail. (Row 1,
Ctrl-C, is at a real terminal in test_pty.py.)"""

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
from flux7.shared.agent.agent import Agent, Workspace
from flux7.shared.agent.asked import AskedCalls
from flux7.shared.agent.builtin_tools import BUILTINS, ToolContext
from flux7.shared.agent.context import SUMMARY_PROMPT, ContextEngine
from flux7.shared.agent.llm import make_chat
from flux7.shared.agent.mesh_tools import MeshTools
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

pytestmark = pytest.mark.served

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
    rows = [r for r in session_rows(mesh, "killed-2") if r["tool"] == "edit_file"]
    assert [(r["approval_status"], r["status_code"], r.get("error", "")) for r in rows] == [
        ("approved", 500, "not run: the agent stopped")
    ]
    assert "told the mesh that 1 call(s) it released never ran" in started.stderr
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
            ["--mesh", "http://127.0.0.1:9", "--mode", "auto", "--offline"],
            llm.url,
            tmp_path / "home",
            stdin="/config\n",
            extra_env=openai_env(),
        )
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert lines["mesh.url"].split()[1:] == ["http://127.0.0.1:9", "flag", "--mesh"]
    assert lines["approval_mode"].split()[1:] == ["auto", "flag", "--mode"]
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


async def test_a_call_interrupted_while_held_is_reported_not_run_once_it_is_approved(
    tmp_path: Path, backend: Backend
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = turns(tool("write_file", path="a.txt", content="x"), [("text", "ok")])
    policy = 'name: p\nagent: "*"\nrules:\n  - tools: ["write_file"]\n    action: human_approval\n'
    with (
        openai_stream(script) as llm,
        running_server(pets_mesh_config(tmp_path, backend, policy, admin_token=None)) as server,
    ):
        asked = AskedCalls(tmp_path / "asked", server.url)
        mesh_tools = MeshTools(server.url, "coder", session_id="held-int")
        agent = Agent(
            make_chat("openai", "m", url=llm.url, api_key="sk-test"),
            mesh_tools,
            workspace=Workspace(work, tmp_path, mode="auto"),
            wait_notice=0.05,
            asked=asked,
        )
        events: list[Any] = []
        async for event in agent.run("write it"):
            events.append(event)
            if event.type == "tool_call_waiting":
                agent.interrupt()  # the user's Ctrl-C while the mesh holds the call
        assert events[-1].type == "agent_interrupted"
        async with httpx.AsyncClient(base_url=server.url, trust_env=False) as admin:
            held = (await admin.get("/approvals", params={"status": "pending"})).json()
            await admin.post(f"/approvals/{held[0]['id']}/approve", json={"resolved_by": "ops"})
            taken = await asked.settle(mesh_tools)  # at the next start (or exit)
            rows = (await admin.get("/sessions/held-int")).json()
        await mesh_tools.aclose()
    assert len(taken) == 1
    done = next(e for e in events if e.type == "tool_call_complete")
    assert (done.policy, done.text) == ("interrupted", "not run: interrupted by the user")
    row = next(r for r in rows if r["tool"] == "write_file")
    assert (row["approval_status"], row["status_code"], row["error"]) == (
        "approved",
        500,
        "not run: interrupted by the user",
    )
    assert not (work / "a.txt").exists()
