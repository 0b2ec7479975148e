"""`flux7 agent`: the terminal agent. One prompt with `-p`, otherwise a REPL.

    flux7 agent --provider anthropic --model claude-sonnet-4-5 [--mesh http://127.0.0.1:9090] [-p "..."]

The model's text goes to stdout as it streams; each governed tool call is shown on stderr (`→ tool {args}`, then
`← policy · trace id` and the start of the result), so `-p` output stays scriptable. Settings come from the flags,
else the environment (read here and nowhere below): MESH_URL, MESH_AGENT_TOKEN, FLUX7_AGENT_ID,
FLUX7_LLM_PROVIDER, FLUX7_LLM_MODEL, FLUX7_LLM_URL, FLUX7_LLM_API_KEY (else ANTHROPIC_API_KEY / OPENAI_API_KEY).
Exit status: 0 when the agent answered, 1 when it stopped on an error, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from .agent import DEFAULT_SYSTEM_PROMPT, Agent
from .events import AgentEvent
from .llm import DEFAULT_URLS, make_chat
from .mesh_tools import MeshTools, MeshUnavailable

__all__ = ["AgentSettings", "main", "settings_from"]

_HELP = """commands:
  /tools     the mesh's tools this agent is offered
  /clear     forget the conversation
  /session   this session's id (the console's Sessions page shows its calls)
  /usage     tokens used so far
  /exit      leave (also /quit, or end of input)"""


@dataclass(frozen=True)
class AgentSettings:
    mesh_url: str
    agent_id: str
    token: str
    provider: str
    model: str
    llm_url: str
    api_key: str
    session_id: str
    max_turns: int
    system_prompt: str


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flux7 agent", description="A terminal agent whose every tool call goes through the flux7 mesh."
    )
    p.add_argument("-p", "--prompt", default=None, help="answer one prompt and exit (default: a REPL)")
    p.add_argument("--mesh", default=None, help="the mesh's URL (MESH_URL, default http://127.0.0.1:9090)")
    p.add_argument("--agent-id", default=None, help="who the mesh sees (FLUX7_AGENT_ID, default flux7-agent)")
    p.add_argument("--token", default=None, help="bearer token for the mesh instead of agent:<id> (MESH_AGENT_TOKEN)")
    p.add_argument("--provider", default=None, choices=sorted(DEFAULT_URLS), help="LLM API (FLUX7_LLM_PROVIDER)")
    p.add_argument("--model", default=None, help="model name (FLUX7_LLM_MODEL)")
    p.add_argument("--llm-url", default=None, help="LLM API base URL (FLUX7_LLM_URL; default: the provider's)")
    p.add_argument("--session", default=None, help="session id sent as X-Session-Id (default: a new one)")
    p.add_argument("--max-turns", type=int, default=20, help="model turns per prompt (default 20)")
    p.add_argument("--system", default=None, help="a file whose text replaces the default system prompt")
    return p


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> AgentSettings:
    """Flags first, then the environment; raises ValueError with a message for the user when something is missing."""
    provider = args.provider or env.get("FLUX7_LLM_PROVIDER") or ""
    if not provider:
        if env.get("ANTHROPIC_API_KEY"):
            provider = "anthropic"
        elif env.get("OPENAI_API_KEY"):
            provider = "openai"
        else:
            provider = "ollama"
    if provider not in DEFAULT_URLS:
        raise ValueError(f"unknown provider {provider!r} (known: {', '.join(sorted(DEFAULT_URLS))})")
    model = args.model or env.get("FLUX7_LLM_MODEL") or ""
    if not model:
        raise ValueError("no model: pass --model or set FLUX7_LLM_MODEL")
    standard_key = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}.get(provider, "")
    api_key = env.get("FLUX7_LLM_API_KEY") or (env.get(standard_key, "") if standard_key else "")
    system_prompt = DEFAULT_SYSTEM_PROMPT
    if args.system:
        try:
            with open(args.system, encoding="utf-8") as f:
                system_prompt = f.read()
        except OSError as e:
            raise ValueError(f"cannot read the system prompt file: {e}") from e
    if args.max_turns < 1:
        raise ValueError("--max-turns must be at least 1")
    return AgentSettings(
        mesh_url=args.mesh or env.get("MESH_URL") or "http://127.0.0.1:9090",
        agent_id=args.agent_id or env.get("FLUX7_AGENT_ID") or "flux7-agent",
        token=args.token or env.get("MESH_AGENT_TOKEN") or "",
        provider=provider,
        model=model,
        llm_url=args.llm_url or env.get("FLUX7_LLM_URL") or "",
        api_key=api_key,
        session_id=args.session or secrets.token_hex(16),
        max_turns=args.max_turns,
        system_prompt=system_prompt,
    )


class Renderer:
    """Text to `out` as it streams, tool activity to `err`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self._mid_line = False

    def show(self, event: AgentEvent) -> None:
        if event.type == "text_delta":
            self.out.write(event.text)
            self.out.flush()
            self._mid_line = not event.text.endswith("\n")
        elif event.type == "tool_call_start":
            self._end_line()
            self.err.write(f"→ {event.tool} {json.dumps(event.arguments, ensure_ascii=False)}\n")
            self.err.flush()
        elif event.type == "tool_call_waiting":
            if event.approval_id:
                self.err.write(
                    f"… waiting: approval {event.approval_id[:8]} is pending (mesh approve {event.approval_id[:8]})\n"
                )
            else:
                self.err.write("… waiting for the mesh (a call held for a human's approval waits until resolved)\n")
            self.err.flush()
        elif event.type == "tool_call_complete":
            where = f" · trace {event.trace_id[:12]}" if event.trace_id else ""
            approval = f" · approval {event.approval_id[:8]}" if event.approval_id else ""
            first = event.text.strip().splitlines()[0][:160] if event.text.strip() else ""
            self.err.write(f"← {event.policy}{approval}{where}: {first}\n")
            self.err.flush()
        elif event.type == "text_complete":
            self._end_line()
        elif event.type == "agent_error":
            self._end_line()
            self.err.write(f"error: {event.text}\n")
            self.err.flush()

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False


async def _one(agent: Agent, prompt: str, render: Renderer) -> bool:
    ok = False
    async for event in agent.run(prompt):
        render.show(event)
        ok = ok or event.type == "agent_end"
    return ok


async def _repl(agent: Agent, settings: AgentSettings, render: Renderer) -> int:
    render.err.write(
        f"flux7 agent · {settings.provider}:{settings.model} · mesh {settings.mesh_url} as {settings.agent_id} · "
        f"session {settings.session_id}\n/help for commands\n"
    )
    prompt = "flux7> " if sys.stdin.isatty() else ""  # piped input gets no prompts in its output
    while True:
        try:
            line = await asyncio.to_thread(input, prompt)
        except EOFError:
            render.out.write("\n")
            return 0
        line = line.strip()
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/help":
            render.out.write(_HELP + "\n")
        elif line == "/clear":
            agent.clear()
            render.out.write("conversation cleared\n")
        elif line == "/session":
            render.out.write(settings.session_id + "\n")
        elif line == "/usage":
            render.out.write(
                f"input tokens {agent.usage['input_tokens']}, output tokens {agent.usage['output_tokens']}\n"
            )
        elif line == "/tools":
            try:
                tools = await agent.refresh_tools()
            except MeshUnavailable as e:
                render.err.write(f"error: {e}\n")
                continue
            for tool in tools:
                render.out.write(f"{tool.name:<32} {tool.spec.description}\n")
            if not tools:
                render.out.write("the mesh offers no tools\n")
        elif line.startswith("/"):
            render.err.write(f"unknown command {line.split()[0]} (/help lists them)\n")
        else:
            await _one(agent, line, render)
        render.out.flush()


async def _main(settings: AgentSettings, prompt: str | None) -> int:
    chat = make_chat(settings.provider, settings.model, url=settings.llm_url, api_key=settings.api_key)
    mesh = MeshTools(settings.mesh_url, settings.agent_id, token=settings.token, session_id=settings.session_id)
    agent = Agent(chat, mesh, system_prompt=settings.system_prompt, max_turns=settings.max_turns)
    render = Renderer(sys.stdout, sys.stderr)
    try:
        if prompt is not None:
            return 0 if await _one(agent, prompt, render) else 1
        return await _repl(agent, settings, render)
    finally:
        await chat.aclose()
        await mesh.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = settings_from(args, os.environ)
    except ValueError as e:
        parser.error(str(e))
    try:
        return asyncio.run(_main(settings, args.prompt))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
