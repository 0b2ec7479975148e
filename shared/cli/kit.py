"""How every flux7 command runs: one click tree, the same error shape everywhere, env and streams injectable.

`flux7` is the root (shared/cli/main.py); `mesh7`, `mem7`, `sup7` and `mesh` run a subtree of it under their own name.
Each command module defines its click commands and keeps a `main(argv, …)` that returns the exit status, so
`python -m <module>` and the tests call it without going through sys.exit.

Exit status: 0 done, 1 the command ran and found something wrong, 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import click

__all__ = ["CONTEXT", "Fail", "LazyGroup", "Runtime", "UsageFail", "WebApps", "namespace", "run", "runtime", "web_apps"]

# -h as well as --help; help text as wide as the terminal allows (up to 100 columns).
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass(frozen=True)
class WebApps:
    """The HTTP apps, as the core reaches them: handed to the command tree by the entry point (functions/entry.py),
    never imported here, since the core (`shared/`) never imports the edge (`functions/`). `flux7 serve` hands
    granian a factory to import in each worker, `mem7 serve` the memory role's, and `mesh7 --mcp` serves the
    mesh's HTTP API beside stdio."""

    mesh_factory: str  # "module:function" that granian imports in each `flux7 serve` worker: an RSGI app
    memory_factory: str  # the same for `mem7 serve`
    mesh_app: Callable[[Any], Any]  # Mesh -> its ASGI app (the HTTP API beside `mesh7 --mcp`)


@dataclass(frozen=True)
class Runtime:
    """What a command reads and writes besides its arguments (the only way commands see the environment)."""

    env: Mapping[str, str]
    out: TextIO
    err: TextIO
    apps: WebApps | None = None  # the web apps, when the entry point provides them


def runtime() -> Runtime:
    ctx = click.get_current_context()
    found = ctx.find_object(Runtime)
    return found if found is not None else Runtime(os.environ, sys.stdout, sys.stderr)


def web_apps() -> WebApps:
    """The web apps the entry point handed over; a command that serves HTTP without them says how to run it."""
    apps = runtime().apps
    if apps is None:
        raise Fail(
            "this command serves HTTP and needs the web apps: run it as `flux7 …` / `mesh7 …` / `mem7 …` "
            "(or `python -m flux7.functions.entry …`)",
            2,
        )
    return apps


class Fail(Exception):
    """A short message for the user, printed as `<command path>: <message>`, with an exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = code
        ctx = click.get_current_context(silent=True)  # raised inside a command: name it (its context ends first)
        self.path = ctx.command_path if ctx is not None else ""


class UsageFail(click.UsageError):
    """Bad usage found after parsing (two options that exclude each other, a missing value)."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported when used. `lazy` maps a name to ("module:attribute", short help),
    so `--help` lists every command without importing the heavy ones. Unknown names get one short line naming
    the valid ones."""

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *(n for n in self.lazy if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in self.lazy:
            return None
        module, _, attr = self.lazy[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}:{attr} is not a click command")
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if self.get_command(ctx, name) is None and not name.startswith("-"):
            valid = ", ".join(self.list_commands(ctx))
            raise click.UsageError(f'unknown subcommand "{name}" (valid: {valid})', ctx=ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit=formatter.width - 6 - len(name))))
            else:
                rows.append((name, self.lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# click >= 8.2 raises this for a group run without a command; older versions print the help themselves.
_NO_ARGS: tuple[type[click.UsageError], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if isinstance(t, type)
)


def _say(err: TextIO, path: str, message: str, hint: str = "") -> None:
    print(f"{path}: {message}", file=err)
    if hint:
        print(hint, file=err)


def run(
    command: click.Command,
    argv: Sequence[str] | None,
    *,
    prog: str,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    apps: WebApps | None = None,
) -> int:
    """Run `command` as the program `prog` on `argv` (default sys.argv[1:]); return the exit status. `apps`: the
    web apps, for the commands that serve HTTP."""
    rt = Runtime(os.environ if env is None else env, out or sys.stdout, err or sys.stderr, apps)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=args, prog_name=prog, standalone_mode=False, obj=rt)
    except _NO_ARGS as e:  # a group called without a command: its help, as a usage error
        print(e.ctx.get_help() if e.ctx is not None else e.format_message(), file=rt.out)
        return 2
    except click.UsageError as e:
        path = e.ctx.command_path if e.ctx is not None else prog
        message = e.message
        if message and message[0].isupper() and not message[:2].isupper():
            message = message[0].lower() + message[1:]  # click's "No such option" reads as ours do
        _say(rt.err, path, message.rstrip("."), f"Run '{path} --help' for usage.")
        return 2
    except Fail as e:
        _say(rt.err, e.path or prog, e.message)
        return e.exit_code
    except click.ClickException as e:
        _say(rt.err, prog, e.format_message())
        return e.exit_code
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except (click.Abort, KeyboardInterrupt):
        return 130
    return int(result or 0)


def namespace(**values: Any) -> argparse.Namespace:
    """click's parameters as the Namespace the command functions were written against."""
    return argparse.Namespace(**values)


def delegate(target: str, help_text: str, name: str) -> click.Command:
    """A command that hands every argument after its name to `module:function(argv)` (a command that parses its
    own arguments, with its own --help naming itself `flux7 <name>`)."""

    @click.command(
        name=name,
        help=help_text,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "allow_interspersed_args": False},
    )
    @click.argument("argv", nargs=-1, type=click.UNPROCESSED)
    def command(argv: tuple[str, ...]) -> int:
        module, _, attr = target.partition(":")
        function: Callable[[list[str]], int] = getattr(importlib.import_module(module), attr)
        try:
            return int(function(list(argv)) or 0)
        except SystemExit as e:  # argparse's own usage errors and --help
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)

    return command
