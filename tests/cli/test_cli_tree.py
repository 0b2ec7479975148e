"""The `flux7` command tree as a newcomer meets it: every command listed and naming itself in --help, the drop-in
names (mesh7, mem7, sup7, mesh) running their subtrees, and short errors that say what to do."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import click
import pytest

from flux7.functions import entry
from flux7.shared.cli import approvals as approvals_cli
from flux7.shared.cli.kit import LazyGroup
from flux7.shared.cli.main import flux7, mesh7
from flux7.shared.supervisor import cli as supervisor_cli
from tests.support.http import free_port
from tests.support.server import REPO

# The installed console scripts' functions (pyproject.toml [project.scripts]): each returns the exit status the script
# exits with, and writes to sys.stdout and sys.stderr, so a run in process sees what a terminal would.
ENTRY: dict[str, Callable[[list[str]], int | None]] = {
    "flux7": entry.main,
    "mesh7": entry.mesh7_main,
    "mem7": entry.mem7_main,
    "sup7": supervisor_cli.main,
    "mesh": approvals_cli.main,
}


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def cli(name: str, *args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> Done:
    """`name args…` as its console script runs it (in this process: no server starts on these paths)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.chdir(cwd),
        mock.patch.dict(os.environ, env or {}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = ENTRY[name](list(args))
        except SystemExit as e:  # what sys.exit would make of it
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Done(int(code or 0), out.getvalue(), err.getvalue())


def walk(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    ctx = click.Context(group, info_name=path[-1])
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"{' '.join(path)} lists {name} but cannot load it"
        yield [*path, name], command
        if isinstance(command, click.Group):
            yield from walk(command, [*path, name])


COMMANDS = [p for p, _ in walk(flux7, ["flux7"])]


def test_the_tree_has_every_command_a_newcomer_looks_for() -> None:
    names = {" ".join(p[1:]) for p in COMMANDS}
    expected = {
        "serve", "mcp", "trace", "trace verify", "discover", "approvals", "approvals pending", "approvals approve",
        "approvals halt", "memory", "memory serve", "memory verify", "memory mcp", "supervisor", "supervisor start",
        "supervisor status", "token", "token issue", "token enable", "agent", "doctor", "backup", "restore",
    }  # fmt: skip
    assert expected <= names, expected - names
    top = flux7.list_commands(click.Context(flux7))
    listed = cli("flux7", "--help")
    assert listed.returncode == 0
    for name in top:  # every top-level command is in `flux7 --help`, with its line of help
        assert f"\n  {name} " in listed.stdout, name
    assert "mesh7" in listed.stdout and "mem7" in listed.stdout  # the aliases are explained


def test_lazy_entries_load_and_have_help() -> None:
    """`flux7 --help` shows each registered line without importing the command; each must load and explain itself."""
    for group in (flux7, mesh7):
        assert isinstance(group, LazyGroup)
        for name, (_target, line) in group.lazy.items():
            command = group.get_command(click.Context(group), name)
            assert command is not None and command.name == name and (command.help or "").strip() and line, name


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p[1:]) for p in COMMANDS])
def test_every_help_exits_0_and_names_itself(path: list[str]) -> None:
    done = cli("flux7", *path[1:], "--help")
    assert done.returncode == 0, done.stderr
    first = next(line for line in done.stdout.splitlines() if line.strip())
    # click prints "Usage: flux7 x y …"; the delegated agent (argparse) "usage: flux7 agent …"
    assert first.lower().startswith(f"usage: {' '.join(path)}"), first
    assert "sup7" not in first or path[:2] != ["flux7", "supervisor"]


@pytest.mark.parametrize(
    ("alias", "subtree", "commands"),
    [
        ("mesh7", [], ["serve", "mcp", "trace", "discover"]),
        ("mem7", ["memory"], ["mcp", "serve", "rescan", "prune", "verify", "export"]),
        ("sup7", ["supervisor"], ["start", "status"]),
        ("mesh", ["approvals"], ["pending", "show", "approve", "deny", "watch", "halt", "halts", "resume"]),
    ],
)
def test_each_alias_is_its_subtree_under_its_own_name(alias: str, subtree: list[str], commands: list[str]) -> None:
    helped = cli(alias, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"Usage: {alias} "), helped.stdout
    for name in commands:
        assert f"\n  {name} " in helped.stdout, (alias, name)
    sub = cli(alias, commands[-1], "--help")
    assert sub.returncode == 0 and sub.stdout.startswith(f"Usage: {alias} {commands[-1]} "), sub.stdout
    if subtree:
        via_flux7 = cli("flux7", *subtree, commands[-1], "--help")
        # the same command: the same options, only the name differs
        assert via_flux7.stdout.replace(f"flux7 {' '.join(subtree)}", alias) == sub.stdout


def test_mesh7_keeps_its_flags_and_trace_verify_works_from_both_names(tmp_path: Path) -> None:
    helped = cli("mesh7", "--help").stdout
    for flag in ("--config", "--port", "--host", "--workers", "--openapi", "--backend", "--mcp", "--mcp-agent",
                 "--mcp-session-id", "--version"):  # fmt: skip
        assert flag in helped, flag
    assert cli("mesh7", "--version").stdout.strip().startswith("mesh7 ")
    assert cli("flux7", "--version").stdout.strip().startswith("flux7 ")
    for name in ("flux7", "mesh7"):
        missing = cli(name, "trace", "verify", str(tmp_path / "none.jsonl"))
        assert missing.returncode == 2 and "none.jsonl" in missing.stderr, missing.stderr
        assert "invalid choice" not in missing.stderr and f"{name} trace verify:" in missing.stderr
    refused = cli("mesh7", "--openapi", "http://127.0.0.1:1/spec.json")
    assert refused.returncode == 2 and "--openapi and --backend go together" in refused.stderr
    mcp_extra = cli("mesh7", "--mcp", "--workers", "2")
    assert mcp_extra.returncode == 2 and "--mcp does not take --workers" in mcp_extra.stderr


def test_usage_errors_are_two_short_lines_naming_the_command() -> None:
    bare = cli("flux7", "token")  # a group without a command: its help, exit 2
    assert bare.returncode == 2 and bare.stdout.startswith("Usage: flux7 token ") and bare.stderr == ""
    unknown = cli("flux7", "frobnicate")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[0].startswith('flux7: unknown subcommand "frobnicate" (valid: serve, mcp,')
    assert unknown.stderr.splitlines()[1] == "Run 'flux7 --help' for usage."
    option = cli("flux7", "supervisor", "status", "--bogus")
    assert option.returncode == 2
    assert option.stderr.splitlines() == [
        "flux7 supervisor status: no such option '--bogus'",
        "Run 'flux7 supervisor status --help' for usage.",
    ]
    halt = cli("mesh", "halt")
    assert halt.returncode == 2 and halt.stderr.startswith("mesh halt: give exactly one of --agent, --session or --all")
    assert "Traceback" not in unknown.stderr + option.stderr + halt.stderr


def test_db_and_config_are_honoured_or_refused(tmp_path: Path) -> None:
    nope = str(tmp_path / "nope.db")
    for command in ("verify", "prune", "export"):
        done = cli("mem7", command, "--db", nope, env={"MEM7_DIR": str(tmp_path / "m")})
        assert done.returncode == 2 and f"mem7 {command}: {nope}: no such" in done.stderr, done.stderr
        assert "chain holds" not in done.stdout and not Path(nope).exists()
    token = cli("flux7", "token", "list", "--db", nope)
    assert token.returncode == 2 and "no such database" in token.stderr and not Path(nope).exists()
    both = cli("flux7", "token", "list", "--db", nope, "--config", str(tmp_path / "c.yaml"))
    assert both.returncode == 2 and "give --db or --config, not both" in both.stderr
    sup7 = cli("sup7", "status", cwd=tmp_path)  # no -c and no ./sup7.yaml
    assert sup7.returncode == 2
    assert "sup7 status: config error:" in sup7.stderr and "pass -c FILE" in sup7.stderr
    assert cli("flux7", "supervisor", "-c", str(tmp_path / "x.yaml"), "status").stderr.startswith(
        "flux7 supervisor status: config error:"
    )


def test_a_yaml_syntax_error_keeps_its_caret_diagram(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("port: 9090\npolicies:\n  - name: x\n   agent: y\n")
    done = cli("flux7", "serve", "--config", str(bad))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"flux7: config error: {bad}: (yaml): line 4, column 4: expected <block end>")
    assert "<unicode string>" not in done.stderr
    assert lines[1].strip() == "agent: y" and lines[2].strip() == "^"
    assert lines[2].index("^") == lines[1].index("agent")  # under the offending spot
    assert len(lines) == 3


def test_a_cli_tool_whose_binary_is_missing_refuses_the_start(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "cli_tools:\n  - {name: here, bin: /bin/echo, bare: {}}\n  - {name: gone, bin: flux7-no-such-bin, bare: {}}\n"
    )
    port = str(free_port())  # no daemon there: `--mcp` would otherwise relay to it
    for name, args in (
        ("flux7", ["serve", "--config", str(cfg), "--port", port]),
        ("mesh7", ["--mcp", "--config", str(cfg), "--port", port]),
    ):
        done = cli(name, *args)
        assert done.returncode == 2, done.stderr
        assert "cli_tools[1].bin: flux7-no-such-bin is not on the PATH" in done.stderr
        assert "remove the 'gone' entry" in done.stderr


@pytest.mark.served
def test_a_refused_start_is_the_process_exit_status_2_with_the_message_on_stderr(tmp_path: Path) -> None:
    """The one case run as a real process: the console script exits with what `main` returned (the rest of this file
    calls `main` in process)."""
    bad = tmp_path / "config.yaml"
    bad.write_text("port: 9090\npolicies:\n  - name: x\n   agent: y\n")
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(bad), "--port", str(free_port())],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"flux7: config error: {bad}: (yaml): line 4, column 4:"), done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_docs_cli_md_lists_every_command() -> None:
    """Each command of the tree is in docs/cli.md's listing: a top-level one on a line of its own, a subcommand on
    a line of its group (`flux7 token        issue | revoke | list …`)."""
    text = (REPO / "docs" / "cli.md").read_text()
    listing = text.split("```\n", 2)[1]
    lines = [line for line in listing.splitlines() if line.startswith("flux7 ")]
    missing = []
    for path in COMMANDS:
        group, *rest = path[1:]
        of_group = [line for line in lines if line.split()[1] == group]
        if not of_group or (
            rest and not any(re.search(rf"(?<![\w-]){re.escape(rest[-1])}(?![\w-])", line) for line in of_group)
        ):
            missing.append(" ".join(path))
    assert not missing, f"docs/cli.md does not list: {missing}"
