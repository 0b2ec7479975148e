"""`flux7 agent`: the terminal agent. One prompt with `-p`, otherwise a REPL.

    flux7 agent --model claude-sonnet-4-5 [--mesh http://127.0.0.1:9090] [--mode on-request] [-p "..."]

Settings are layered (shared/agent/config.py): `~/.config/flux7/agent.toml`, the project's `.flux7/agent.toml`,
the environment (read here and nowhere below), then these flags. The project's settings that run code, send data
away, read outside the folder or loosen the safety mode apply only once the user trusts the folder
(shared/agent/trust.py): `--trust`, or a yes at the prompt the REPL shows at a terminal; otherwise they are
named and left out. This module only parses the command line (click, like every flux7 command: the same help
and error lines); the agent (shared/agent/repl.py) is imported after, so `--help` answers at once. Exit status:
0 when the agent answered, 1 when it stopped on an error (a refused credential, a cut answer included), 2 for bad
usage or configuration, 130 when the user interrupted `-p`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from flux7.shared.agent.safety import MODES
from flux7.shared.cli.kit import CONTEXT, run

__all__ = ["agent", "main"]


@click.command(
    "agent",
    context_settings=CONTEXT,
    epilog="In the REPL, /help lists its commands. Ctrl-C or Esc ends a run; Ctrl-C twice on an empty line leaves.",
)
@click.option("-p", "--prompt", default=None, metavar="TEXT", help="answer one prompt and exit (default: a REPL)")
@click.option("--mesh", default=None, metavar="URL", help="the mesh's URL (MESH_URL, default http://127.0.0.1:9090)")
@click.option("--agent-id", default=None, metavar="ID", help="who the mesh sees (FLUX7_AGENT_ID, default flux7-agent)")
@click.option("--token", default=None, help="bearer token for the mesh instead of agent:<id> (MESH_AGENT_TOKEN)")
@click.option("--provider", default=None, help="LLM API: anthropic, openai or ollama (FLUX7_LLM_PROVIDER)")
@click.option("--model", default=None, help="model name (FLUX7_LLM_MODEL)")
@click.option(
    "--llm-url", default=None, metavar="URL", help="LLM API base URL (FLUX7_LLM_URL; default: the provider's)"
)
@click.option(
    "--llm-timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="how long the model may stay silent (FLUX7_LLM_TIMEOUT, default 120)",
)
@click.option("--temperature", type=float, default=None, help="sampling temperature, 0..2")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=None,
    help="approval mode (FLUX7_AGENT_MODE, default on-request)",
)
@click.option("--offline", is_flag=True, default=False, help="run without the mesh: nothing is governed or traced")
@click.option("--session", default=None, metavar="ID", help="id of a new session, also its X-Session-Id")
@click.option(
    "--resume",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ID]",
    help="resume a saved session by id or prefix (alone: the newest)",
)
@click.option("-c", "--continue", "cont", is_flag=True, help="resume the newest session started here")
@click.option("--max-turns", type=int, default=None, help="model turns per prompt (default 20)")
@click.option("--json", "json_", is_flag=True, help="write every event as a JSON line on stdout (for scripts)")
@click.option("--plain", is_flag=True, help="plain text even on a terminal (no colours, no markdown)")
@click.option("--system", default=None, metavar="FILE", help="a file whose text replaces the default system prompt")
@click.option(
    "--trust",
    is_flag=True,
    help="trust this folder: its .flux7 settings (hooks, MCP servers, tools, URLs, mode, rules) apply; remembered",
)
def agent(**options: Any) -> int:
    """A terminal coding agent whose every tool call is governed by the flux7 mesh."""
    import argparse

    options["json"] = options.pop("json_")
    options["offline"] = options["offline"] or None
    return _main(argparse.Namespace(**options))


def main(argv: list[str] | None = None) -> int:
    return run(agent, argv, prog="flux7 agent")


def _flags(args: Any) -> dict[str, Any]:
    return {
        "provider": args.provider,
        "model": args.model,
        "llm_url": args.llm_url,
        "temperature": args.temperature,
        "llm_timeout": args.llm_timeout,
        "approval_mode": args.mode,
        "max_turns": args.max_turns,
        "system_prompt_file": args.system,
        "mesh.url": args.mesh,
        "mesh.agent_id": args.agent_id,
        "mesh.offline": args.offline,
        "token": args.token,
    }


def _main(args: Any) -> int:
    import asyncio

    from flux7.shared.agent.config import ConfigError, load_config
    from flux7.shared.agent.repl import run
    from flux7.shared.agent.sessions import SessionError
    from flux7.shared.agent.trust import remember

    env = os.environ
    home = Path(env.get("HOME") or Path.home())
    cwd = Path.cwd().resolve()
    try:
        config = load_config(_flags(args), env, cwd=cwd, home=home, trust=args.trust)
        if config.ignored and args.prompt is None and not args.json and sys.stdin.isatty() and _ask_trust(config):
            args.trust = True
            config = load_config(_flags(args), env, cwd=cwd, home=home, trust=True)
        if args.trust and not config.trust_remembered:
            remember(config.user_file, config.workspace)
            print(f"note: trusted {config.workspace} (remembered in {config.user_file})", file=sys.stderr)
    except ConfigError as e:
        print(f"flux7 agent: config error: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"flux7 agent: cannot remember the folder's trust: {e}", file=sys.stderr)
        return 2
    if config.ignored:
        how = "-p runs without them" if args.prompt is not None else "the agent runs without them"
        print(
            f"note: {config.workspace} is not trusted, so its project settings that run code, send data elsewhere, "
            f"read outside the folder or loosen the safety mode are ignored ({how}): {'; '.join(config.ignored)}. "
            "Trust the folder with --trust.",
            file=sys.stderr,
        )
    try:
        return asyncio.run(run(args, config, env, cwd, home))
    except ConfigError as e:
        print(f"flux7 agent: config error: {e}", file=sys.stderr)
        return 2
    except SessionError as e:
        print(f"flux7 agent: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _ask_trust(config: Any) -> bool:
    """At a terminal: show what the folder's settings would do and ask once whether to trust it."""
    where = config.project_file or config.workspace / ".flux7"
    print(f"{where} is in a folder you have not trusted. It asks for:", file=sys.stderr)
    for item in config.ignored:
        print(f"  - {item}", file=sys.stderr)
    question = f"Trust {config.workspace}? Its settings then apply, now and later ({config.user_file}). [y/N] "
    try:
        answer = input(question)  # input() writes the question where the terminal shows it
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


if __name__ == "__main__":
    sys.exit(main())
