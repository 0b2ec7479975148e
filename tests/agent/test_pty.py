"""The REPL through a real pseudo-terminal: typed input, the screen it renders, a confirmation answered at the
keyboard, and the mesh's trace of what ran."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.llm_stream_servers import last_tool_results, openai_stream
from tests.agent.test_cli import agent_env
from tests.agent.test_coding_agent import POLICY, openai_env, tool, turns
from tests.support.mesh import pets_mesh_config
from tests.support.server import running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _controlling_terminal() -> None:
    """In the child, after setsid: the pty on stdin becomes its controlling terminal, so Ctrl-C typed there is a
    SIGINT to it, as in a real terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A process on the slave side of a pty (its controlling terminal); what it writes accumulates in `screen`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_controlling_terminal,
        )
        os.close(slave)
        self._screen = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # EIO: the other side closed
                return
            if not data:
                return
            self._screen += data

    @property
    def raw(self) -> str:
        return self._screen.decode("utf-8", "replace")

    @property
    def screen(self) -> str:
        """What a person reads: colours and cursor movements taken out."""
        return _ANSI.sub("", self.raw).replace("\r\n", "\n").replace("\r", "\n")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for(self, text: str, after: int = 0) -> int:
        """Wait until `text` is on the screen past position `after`; where it ends."""
        wait_until(lambda: text in self.screen[after:], timeout=30, what=f"{text!r} on the screen:\n{self.screen}")
        return self.screen.index(text, after) + len(text)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        os.close(self.master)


def test_the_repl_at_a_terminal_asks_and_runs_what_the_user_confirms(tmp_path: Path, backend: Backend) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = turns(tool("shell", command="touch made.txt"), [("text", "## Result\n\nMade **it**.")])
    with (
        openai_stream(script) as llm,
        running_server(pets_mesh_config(tmp_path, backend, POLICY, admin_token=None)) as mesh,
    ):
        env = {**agent_env(llm.url, tmp_path / "home", openai_env()), "TERM": "xterm-256color"}
        argv = [sys.executable, "-m", "flux7.functions.entry", "agent", "--mesh", mesh.url, "--session", "tty-1"]
        term = Terminal(argv, env, work)
        try:
            at = term.wait_for("flux7> ")  # a prompt, since stdin is a terminal
            assert "session tty-1" in term.screen and "mode on-request" in term.screen
            term.type("make a file\n")
            at = term.wait_for("run shell? [y/N/a/t] ", at)
            assert "? shell needs your confirmation: shell changes things (on-request mode asks)" in term.screen
            assert not (work / "made.txt").exists()
            term.type("y\n")
            at = term.wait_for("Made it.", at)  # markdown rendered: no `**`, no `##`
            at = term.wait_for("flux7> ", at)
            term.type("/exit\n")
            term.proc.wait(30)
        finally:
            term.close()
        rows = httpx.get(f"{mesh.url}/sessions/tty-1", trust_env=False).json()
    assert term.proc.returncode == 0
    assert (work / "made.txt").exists()
    assert "make a file" in term.screen  # the terminal echoed what was typed
    assert "## Result" not in term.screen and "Result" in term.screen and "**" not in term.screen
    assert "\x1b[" in term.raw  # Rich's colours, on a terminal
    history = (tmp_path / "home/.local/share/flux7/agent/history").read_text().splitlines()
    assert "make a file" in history and "/exit" in history  # kept for the next session's up-arrow
    assert "← allow · trace" in term.screen and "tokens: this prompt 24 in / 14 out" in term.screen
    assert last_tool_results(llm.bodies[1]) == ["exit code 0\n"]
    assert [(r["tool"], r["policy"], r["exit_code"]) for r in rows] == [("shell", "allow", 0)]


def test_the_repl_asks_once_whether_to_trust_a_folder_whose_settings_run_commands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hook = '[[hooks]]\nevent = "session_start"\ncommand = "touch hooked.txt"\n'
    folders = {answer: tmp_path / f"cloned-{answer}" for answer in ("n", "y")}
    for folder in folders.values():
        (folder / ".flux7").mkdir(parents=True)
        (folder / ".flux7" / "agent.toml").write_text(hook)
    with openai_stream(turns([("text", "Hello.")])) as llm:
        env = {**agent_env(llm.url, home, openai_env()), "TERM": "xterm-256color"}
        argv = [sys.executable, "-m", "flux7.functions.entry", "agent", "--mesh", "http://127.0.0.1:9"]
        for answer, folder in folders.items():
            term = Terminal(argv, env, folder)
            try:
                at = term.wait_for("[y/N] ")
                assert "is in a folder you have not trusted" in term.screen
                assert "hooks (runs commands)" in term.screen and not (folder / "hooked.txt").exists()
                term.type(f"{answer}\n")
                at = term.wait_for("flux7> ", at)
                term.type("/exit\n")
                term.proc.wait(30)
            finally:
                term.close()
            assert term.proc.returncode == 0
            if answer == "n":  # nothing ran, and the screen says what was left out
                assert not (folder / "hooked.txt").exists() and "is not trusted" in term.screen
            else:
                assert (folder / "hooked.txt").exists() and "note: trusted" in term.screen
    remembered = (home / ".config" / "flux7" / "agent.toml").read_text()
    assert f'[projects."{folders["y"]}"]' in remembered and str(folders["n"]) not in remembered


# Issue 34, row 1: Ctrl-C (and Esc) as in Claude Code and Codex. Each test fails on the code before it: Ctrl-C
# mid-stream quit the program (130), at a question or the prompt it waited for Enter and lost the next line, and a
# command it killed was "timed out after 120 s" for the model and the trail, the run going on.

CTRL_C, ESC = "\x03", "\x1b"


def _argv(mesh_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "flux7.functions.entry", "agent", "--mesh", mesh_url, *extra]


def _user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "user"]


def test_ctrl_c_or_esc_mid_answer_ends_the_turn_and_the_next_prompt_goes_on(tmp_path: Path) -> None:
    def script(body: dict[str, Any]) -> list[tuple[str, ...]]:
        prompt = _user_texts(body)[-1]
        if prompt.startswith("slow"):
            return [("text", "Thinking about it"), ("hold",)]
        return [("text", "Hello again.")]

    with openai_stream(script) as llm:
        env = {**agent_env(llm.url, tmp_path / "home", openai_env()), "TERM": "xterm-256color"}
        term = Terminal(_argv("http://127.0.0.1:9", "--offline", "--session", "cc-1", "--plain"), env, tmp_path)
        try:
            at = term.wait_for("flux7> ")
            for key in (CTRL_C, ESC):
                llm.held.clear()
                term.type("slow one\n")
                at = term.wait_for("Thinking about it", at)
                wait_until(llm.held.is_set, timeout=30, what="the model's stream held open")
                term.type(key)
                at = term.wait_for("interrupted: back to the prompt", at)
                at = term.wait_for("flux7> ", at)
                assert term.proc.poll() is None  # still running: the turn ended, not the program
            term.type("and now?\n")
            at = term.wait_for("Hello again.", at)
            at = term.wait_for("flux7> ", at)
            term.type("/exit\n")
            term.proc.wait(30)
        finally:
            term.close()
    assert term.proc.returncode == 0
    last = llm.bodies[-1]["messages"]
    assert [m["role"] for m in last[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert last[2]["content"] == "Thinking about it\n\n[interrupted by the user]"  # the model knows it was cut


def test_ctrl_c_at_a_question_answers_no_at_once_and_the_next_line_is_a_prompt(tmp_path: Path) -> None:
    def script(body: dict[str, Any]) -> list[tuple[str, ...]]:
        if _user_texts(body)[-1] == "make a file" and not last_tool_results(body):
            return tool("shell", command="touch made.txt")
        return [("text", "Understood.")]

    work = tmp_path / "work"
    work.mkdir()
    with openai_stream(script) as llm:
        env = {**agent_env(llm.url, tmp_path / "home", openai_env()), "TERM": "xterm-256color"}
        term = Terminal(_argv("http://127.0.0.1:9", "--offline", "--session", "cc-2", "--plain"), env, work)
        try:
            at = term.wait_for("flux7> ")
            term.type("make a file\n")
            at = term.wait_for("run shell? [y/N/a/t] ", at)
            term.type(CTRL_C)  # no Enter: the question is answered by the key itself
            at = term.wait_for("Understood.", at)
            at = term.wait_for("flux7> ", at)
            term.type("next question\n")
            at = term.wait_for("Understood.", at)
            term.type("/exit\n")
            term.proc.wait(30)
        finally:
            term.close()
    assert term.proc.returncode == 0 and not (work / "made.txt").exists()
    assert last_tool_results(llm.bodies[1])[0].startswith("refused: the user did not confirm it")
    assert _user_texts(llm.bodies[-1])[-1] == "next question"  # the line typed after Ctrl-C was not swallowed


def test_ctrl_c_at_the_prompt_clears_the_line_and_twice_on_an_empty_line_leaves(tmp_path: Path) -> None:
    with openai_stream(lambda _b: [("text", "never asked")]) as llm:
        env = {**agent_env(llm.url, tmp_path / "home", openai_env()), "TERM": "xterm-256color"}
        term = Terminal(_argv("http://127.0.0.1:9", "--offline", "--plain"), env, tmp_path)
        try:
            at = term.wait_for("flux7> ")
            term.type("half a thought")
            term.wait_for("half a thought", at)
            term.type(CTRL_C)  # the line is dropped, the agent stays
            at = term.wait_for("flux7> ", at)
            term.type(CTRL_C)
            at = term.wait_for("Ctrl-C again to leave", at)
            term.type(CTRL_C)
            term.proc.wait(30)
        finally:
            term.close()
    assert term.proc.returncode == 0
    assert llm.bodies == []  # nothing typed before Ctrl-C was sent


def test_ctrl_c_during_a_command_kills_it_and_the_model_and_trail_read_interrupted(
    tmp_path: Path, backend: Backend
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo started; sleep 60; echo never"

    def script(body: dict[str, Any]) -> list[tuple[str, ...]]:
        if _user_texts(body)[-1] == "run it":
            return tool("shell", command=command)
        return [("text", "Noted.")]

    with (
        openai_stream(script) as llm,
        running_server(pets_mesh_config(tmp_path, backend, POLICY, admin_token=None)) as mesh,
    ):
        env = {**agent_env(llm.url, tmp_path / "home", openai_env()), "TERM": "xterm-256color"}
        term = Terminal(_argv(mesh.url, "--session", "cc-3", "--mode", "auto"), env, work)  # Rich's rendering
        try:
            at = term.wait_for("flux7> ")
            term.type("run it\n")
            at = term.wait_for("\nstarted\n", at)  # its output shows as it comes, while it runs
            term.type(CTRL_C)
            at = term.wait_for("interrupted: back to the prompt", at)
            at = term.wait_for("flux7> ", at)
            term.type("what happened?\n")
            at = term.wait_for("Noted.", at)
            term.type("/exit\n")
            term.proc.wait(30)
        finally:
            term.close()
        rows = httpx.get(f"{mesh.url}/sessions/cc-3", trust_env=False).json()
    assert term.proc.returncode == 0
    told = last_tool_results(llm.bodies[-1])
    assert told == []  # the next prompt is a user message; the interrupted call's result came before it
    results = [m for m in llm.bodies[-1]["messages"] if m["role"] == "tool"]
    assert results[0]["content"].startswith("error: interrupted by the user after ")
    assert ": the command was killed; its output until then:\nstarted" in results[0]["content"]
    assert "timed out" not in results[0]["content"]
    assert [(r["tool"], r["policy"], r["status_code"]) for r in rows] == [("shell", "allow", 500)]
    assert rows[0]["error"].startswith("interrupted by the user after ") and "timed out" not in rows[0]["error"]
    assert 0 < rows[0]["latency_ms"] < 30_000  # its real duration, not the 120 s timeout
