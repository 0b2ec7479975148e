"""The REPL through a real pseudo-terminal: typed input, the screen it renders, a confirmation answered at the
keyboard, and the mesh's trace of what ran."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

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


class Terminal:
    """A process on the slave side of a pty; what it writes accumulates in `screen`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        self.master = master
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd)
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
        wait_until(lambda: text in self.screen[after:], timeout=30, what=f"{text!r} on the screen")
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
            at = term.wait_for("run shell? [y/N] ", at)
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
