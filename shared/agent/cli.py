"""`flux7 agent`: the terminal agent. One prompt with `-p`, otherwise a REPL.

    flux7 agent --model claude-sonnet-4-5 [--mesh http://127.0.0.1:9090] [--mode on-request] [-p "..."]

Settings are layered (shared/agent/config.py): `~/.config/flux7/agent.toml`, the project's `.flux7/agent.toml`,
the environment (read here and nowhere below), then these flags. The project's settings that run code, send data
away, read outside the folder or loosen the safety mode apply only once the user trusts the folder
(shared/agent/trust.py): `--trust`, or a yes at the prompt the REPL shows at a terminal; otherwise they are
named and left out. This module only parses the command line; the agent (shared/agent/repl.py) is imported
after, so `--help` answers at once. Exit status: 0 when the agent answered, 1 when it stopped on an error (a
refused credential included), 2 for bad usage or configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from flux7.shared.agent.safety import MODES

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flux7 agent", description="A terminal coding agent whose every tool call is governed by the flux7 mesh."
    )
    p.add_argument("-p", "--prompt", default=None, help="answer one prompt and exit (default: a REPL)")
    p.add_argument("--mesh", default=None, help="the mesh's URL (MESH_URL, default http://127.0.0.1:9090)")
    p.add_argument("--agent-id", default=None, help="who the mesh sees (FLUX7_AGENT_ID, default flux7-agent)")
    p.add_argument("--token", default=None, help="bearer token for the mesh instead of agent:<id> (MESH_AGENT_TOKEN)")
    p.add_argument("--provider", default=None, help="LLM API: anthropic, openai or ollama (FLUX7_LLM_PROVIDER)")
    p.add_argument("--model", default=None, help="model name (FLUX7_LLM_MODEL)")
    p.add_argument("--llm-url", default=None, help="LLM API base URL (FLUX7_LLM_URL; default: the provider's)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature, 0..2")
    p.add_argument("--mode", default=None, choices=MODES, help="approval mode (FLUX7_AGENT_MODE, default on-request)")
    p.add_argument(
        "--offline",
        action="store_true",
        default=None,
        help="run without the mesh: nothing is governed or traced (the banner says so)",
    )
    p.add_argument("--session", default=None, help="id of a new session, also its X-Session-Id (default: a new one)")
    p.add_argument("--resume", nargs="?", const="", default=None, metavar="ID", help="resume a saved session (newest)")
    p.add_argument("-c", "--continue", dest="cont", action="store_true", help="resume the newest session started here")
    p.add_argument("--max-turns", type=int, default=None, help="model turns per prompt (default 20)")
    p.add_argument("--json", action="store_true", help="write every event as a JSON line on stdout (for scripts)")
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal (no colours, no markdown)")
    p.add_argument("--system", default=None, help="a file whose text replaces the default system prompt")
    p.add_argument(
        "--trust",
        action="store_true",
        help="trust this folder: its .flux7 settings (hooks, MCP servers, tools, URLs, mode) apply; remembered",
    )
    return p


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "provider": args.provider,
        "model": args.model,
        "llm_url": args.llm_url,
        "temperature": args.temperature,
        "approval_mode": args.mode,
        "max_turns": args.max_turns,
        "system_prompt_file": args.system,
        "mesh.url": args.mesh,
        "mesh.agent_id": args.agent_id,
        "mesh.offline": args.offline,
        "token": args.token,
    }


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
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
