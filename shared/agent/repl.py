"""The running agent behind `flux7 agent` (shared/agent/cli.py parses the command line, then comes here): the
session picked, the tools gathered, one prompt or the REPL, and how events are rendered.

The model's text goes to stdout as it streams; each tool call is shown on stderr (`→ tool {args}`, then
`← policy · trace id` and the start of the result, an edit's diff), so `-p` output stays scriptable.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import dataclasses
import json
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

from flux7.shared.agent.agent import DEFAULT_SYSTEM_PROMPT, Agent, Confirm, Workspace
from flux7.shared.agent.builtin_tools import ToolContext
from flux7.shared.agent.config import KEY_ENV, AgentConfig, ConfigError, agent_md_files
from flux7.shared.agent.context import ContextEngine
from flux7.shared.agent.custom_tools import load_custom_tools
from flux7.shared.agent.events import AgentEvent
from flux7.shared.agent.hooks import Hooks
from flux7.shared.agent.llm import DEFAULT_URLS, LLMError, make_chat
from flux7.shared.agent.mcp_servers import McpServers
from flux7.shared.agent.mesh_tools import MeshCredentialRefused, MeshTools, MeshUnavailable
from flux7.shared.agent.safety import MODES
from flux7.shared.agent.sandbox import Sandbox, command_env, find_bwrap, hidden_paths
from flux7.shared.agent.sessions import Session, SessionError, SessionStore
from flux7.shared.agent.web import WebAccess

__all__ = ["run", "system_prompt"]

_HELP = """commands:
  /tools     the tools this agent is offered (built-in and the mesh's)
  /mode [M]  the approval mode, or switch to M (read-only always-ask on-request auto-edit auto yolo)
  /compact   replace the conversation so far by the model's summary of it
  /clear     forget the conversation
  /save      save the session now (it is saved after every message anyway)
  /sessions  saved sessions, newest first
  /resume ID continue a saved session (its conversation and mesh session id)
  /model [M] the model, or switch to M (or to PROVIDER:M)
  /session   this session's id (also the mesh session id: the console's Sessions page shows its calls)
  /config    each setting and where it came from
  /usage     tokens used so far
  /exit      leave (also /quit, or end of input)"""


def system_prompt(config: AgentConfig, cwd: Path, env: Mapping[str, str], home: Path) -> str:
    """The default prompt (or `system_prompt_file`), where the agent works, then every AGENT.md that applies."""
    base = DEFAULT_SYSTEM_PROMPT
    if config.system_prompt_file:
        try:
            base = Path(config.system_prompt_file).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read the system prompt file {config.system_prompt_file}: {e.strerror}") from e
    parts = [
        base,
        f"You work in the directory {cwd}. Your built-in tools (read_file, write_file, edit_file, list_dir, glob, "
        "grep, shell, web_fetch, task) run there, on the user's machine; each call is checked by a local safety "
        "layer and then decided by the mesh before it runs.",
    ]
    for path in agent_md_files(cwd, env, home):
        try:
            parts.append(f"# Instructions from {path}\n\n{path.read_text(encoding='utf-8').strip()}")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path}: {e}") from e
    return "\n\n".join(parts)


class Render(Protocol):
    out: TextIO
    err: TextIO

    def show(self, event: AgentEvent) -> None: ...


class JsonRenderer:
    """Every event as one JSON object a line on `out`, fields at their zero value left out."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err

    def show(self, event: AgentEvent) -> None:
        fields = {k: v for k, v in dataclasses.asdict(event).items() if v not in ("", {}, None, False)}
        self.out.write(json.dumps(fields, ensure_ascii=False) + "\n")
        self.out.flush()


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
        elif event.type == "notice":
            self._end_line()
            self._say(f"note: {event.text}")
        elif event.type == "tool_call_start":
            self._end_line()
            self._say(f"→ {event.tool} {json.dumps(event.arguments, ensure_ascii=False)}")
        elif event.type == "tool_call_confirm":
            self._say(f"? {event.tool} needs your confirmation: {event.text}")
        elif event.type == "tool_call_waiting":
            if event.approval_id:
                held = event.approval_id
                self._say(f"… waiting: approval {held} is pending in the mesh (mesh approve {held[:8]})")
            else:
                self._say("… waiting for the mesh (a call held for a human's approval waits until resolved there)")
        elif event.type == "tool_call_complete":
            self._complete(event)
        elif event.type == "text_complete":
            self._end_line()
        elif event.type == "agent_error":
            self._end_line()
            self._say(f"error: {event.text}")

    def _complete(self, event: AgentEvent) -> None:
        where = f" · trace {event.trace_id[:12]}" if event.trace_id else ""
        approval = f" · approval {event.approval_id[:8]}" if event.approval_id else ""
        gate = {"local": "local ", "offline": "offline ", "hook": "hook ", "mesh": ""}.get(event.gate, "")
        code = f" · exit {event.exit_code}" if event.exit_code is not None else ""
        first = event.text.strip().splitlines()[0][:160] if event.text.strip() else ""
        self._say(f"← {gate}{event.policy}{approval}{where}{code}: {first}")
        if event.diff:
            self.err.write(event.diff)
            self.err.flush()

    def _say(self, line: str) -> None:
        self.err.write(line + "\n")
        self.err.flush()

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False


def _terminal_confirm(err: TextIO) -> Confirm:
    """Asks on the terminal (a line of input: y or yes runs it). A local yes never resolves a mesh approval."""

    async def confirm(tool: str, arguments: dict[str, Any], why: str) -> bool:
        err.write(f"  run {tool}? [y/N] ")
        err.flush()
        try:
            answer = await asyncio.to_thread(input)
        except EOFError:
            return False
        return answer.strip().lower() in ("y", "yes")

    return confirm


async def _one(agent: Agent, prompt: str, render: Render) -> bool:
    ok = False
    async for event in agent.run(prompt):
        render.show(event)
        ok = ok or event.type == "agent_end"
    return ok


def _banner(config: AgentConfig, session: Session, resumed: bool) -> str:
    governed = (
        "OFFLINE: tool calls are NOT governed by a mesh nor traced"
        if config.offline
        else f"mesh {config.mesh_url} as {config.agent_id}"
    )
    again = " (resumed)" if resumed else ""
    return (
        f"flux7 agent · {config.provider}:{config.model} · {governed} · mode {config.approval_mode} · "
        f"session {session.id}{again}\n"
    )


def _history(config: AgentConfig) -> None:
    """Line editing and a history kept across sessions (`<sessions.dir>/../history`), at a terminal only."""
    try:
        import readline
    except ImportError:  # a Python without readline: plain input
        return
    path = config.sessions_dir.parent / "history"
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(1000)

    def save() -> None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)

    atexit.register(save)


async def _read_prompt(prompt: str, more: str) -> str:
    """One prompt: a line; lines ending in `\\` continue on the next; a line of `\"\"\"` opens a block that
    the next such line closes."""
    line = await asyncio.to_thread(input, prompt)
    if line.strip() == '"""':
        lines: list[str] = []
        while (next_line := await asyncio.to_thread(input, more)).strip() != '"""':
            lines.append(next_line)
        return "\n".join(lines)
    parts = []
    while line.endswith("\\"):
        parts.append(line[:-1])
        line = await asyncio.to_thread(input, more)
    return "\n".join([*parts, line])


async def _repl(agent: Agent, config: AgentConfig, store: SessionStore, render: Render, env: Mapping[str, str]) -> int:
    render.err.write("/help for commands\n")
    tty = sys.stdin.isatty()
    prompt, more = ("flux7> ", "...    ") if tty else ("", "")  # piped input gets no prompts in its output
    if tty:
        _history(config)
    session = agent.session
    assert session is not None
    while True:
        try:
            line = await _read_prompt(prompt, more)
        except EOFError:
            render.out.write("\n")
            return 0
        line = line.strip()
        if not line:
            continue
        word, _, rest = line.partition(" ")
        if word in ("/exit", "/quit"):
            return 0
        if word == "/help":
            render.out.write(_HELP + "\n")
        elif word == "/clear":
            agent.clear()
            render.out.write("conversation cleared\n")
        elif word == "/session":
            render.out.write(session.id + "\n")
        elif word == "/save":
            store.save(session)
            render.out.write(f"saved {store.path(session.id)}\n")
        elif word == "/resume":
            if not rest.strip():
                render.err.write("usage: /resume ID (/sessions lists them)\n")
                continue
            try:
                chosen = store.load(rest.strip())
            except SessionError as e:
                render.err.write(f"error: {e}\n")
                continue
            agent.switch(chosen)
            session = chosen
            render.out.write(f"resumed {chosen.id} ({len(chosen.messages)} messages)\n")
        elif word == "/compact":
            try:
                compacted = await agent.compact()
            except LLMError as e:
                render.err.write(f"error: compaction failed: {e}\n")
                continue
            if compacted is None:
                render.out.write("nothing to compact\n")
            else:
                sizes = f"~{compacted.before} → ~{compacted.after} tokens"
                render.out.write(f"compacted {compacted.summarized} messages ({sizes})\n")
        elif word == "/model":
            provider, _, model = rest.strip().rpartition(":") if ":" in rest else ("", "", rest.strip())
            if provider and provider not in DEFAULT_URLS:
                render.err.write(f"unknown provider {provider!r} (known: {', '.join(sorted(DEFAULT_URLS))})\n")
                continue
            if provider and provider != session.provider:
                key = env.get("FLUX7_LLM_API_KEY") or env.get(KEY_ENV.get(provider, ""), "")
                if provider in KEY_ENV and not key:
                    render.err.write(f"no API key for {provider}: set {KEY_ENV[provider]}\n")
                    continue
                old_chat = agent.chat
                agent.chat = make_chat(provider, model or old_chat.model, api_key=key, temperature=config.temperature)
                await old_chat.aclose()
                session.provider = provider
            elif model:
                agent.chat.model = model
            session.model = agent.chat.model
            render.out.write(f"model: {session.provider}:{agent.chat.model}\n")
        elif word == "/sessions":
            for s in store.list()[:20]:
                mark = "*" if s.id == session.id else " "
                render.out.write(f"{mark} {s.id}  {s.updated}  {s.cwd}  {s.preview()}\n")
        elif word == "/mode":
            if rest.strip():
                if rest.strip() not in MODES:
                    render.err.write(f"unknown mode {rest.strip()!r} (modes: {', '.join(MODES)})\n")
                    continue
                assert agent.workspace is not None
                agent.workspace.mode = rest.strip()
            render.out.write(f"approval mode: {agent.workspace.mode if agent.workspace else config.approval_mode}\n")
        elif word == "/config":
            for key, origin in sorted(config.origins.items()):
                render.out.write(f"{key:<20} {origin}\n")
        elif word == "/usage":
            render.out.write(
                f"input tokens {agent.usage['input_tokens']}, output tokens {agent.usage['output_tokens']}\n"
            )
        elif word == "/tools":
            try:
                await agent.refresh_tools()
            except MeshUnavailable as e:
                render.err.write(f"error: {e}\n")
            for spec in agent.specs():
                render.out.write(f"{spec.name:<32} {spec.description.splitlines()[0][:80]}\n")
        elif word.startswith("/"):
            render.err.write(f"unknown command {word} (/help lists them)\n")
        else:
            await _one(agent, line, render)
            if agent.stopped:  # the mesh refused the credential: nothing more runs in this session
                return 1
        render.out.flush()


def _session(args: argparse.Namespace, config: AgentConfig, store: SessionStore, cwd: Path) -> tuple[Session, bool]:
    """The session to run: resumed (--resume, --continue) or new."""
    if args.resume is not None:
        if args.resume:
            return store.load(args.resume), True
        newest = store.latest()
        if newest is None:
            raise SessionError(f"no saved sessions in {store.folder}")
        return newest, True
    if args.cont:
        here = store.latest(cwd)
        if here is None:
            raise SessionError(f"no saved session started in {cwd} (--resume ID picks any)")
        return here, True
    session_id = args.session or secrets.token_hex(16)
    if args.session and store.path(session_id).exists():
        raise SessionError(f"session {session_id} is saved already: --resume {session_id} continues it")
    return Session(session_id, str(cwd), config.provider, config.model), False


async def run(args: argparse.Namespace, config: AgentConfig, env: Mapping[str, str], cwd: Path, home: Path) -> int:
    """One prompt (`args.prompt`) or the REPL, with this configuration; the exit status."""
    store = SessionStore(config.sessions_dir)
    session, resumed = _session(args, config, store, cwd)
    prompt_text = system_prompt(config, cwd, env, home)
    chat = make_chat(
        config.provider, config.model, url=config.llm_url, api_key=config.api_key, temperature=config.temperature
    )
    mesh = MeshTools(config.mesh_url, config.agent_id, token=config.token, session_id=session.id)
    render: Render
    if args.json:
        render = JsonRenderer(sys.stdout, sys.stderr)
    elif not args.plain and sys.stdout.isatty():
        from flux7.shared.agent.tui import RichRenderer  # Rich only for a terminal

        render = RichRenderer(sys.stdout, sys.stderr)
    else:
        render = Renderer(sys.stdout, sys.stderr)
    interactive = args.prompt is None or sys.stdin.isatty()
    # What no tool may open and no sandboxed command may see: the user's secrets, the mesh's data, the agent's
    # own sessions, sandbox.hide.
    hidden, unhidden = hidden_paths(
        home,
        cwd,
        env,
        extra=(*config.sandbox_hide, config.sessions_dir.parent),
        roots=(config.workspace,),
    )
    workspace = Workspace(
        cwd=cwd,
        home=home,
        mode=config.approval_mode,
        offline=config.offline,
        tools=ToolContext(
            timeout=config.shell_timeout,
            output_limit=config.shell_output_limit,
            hidden=hidden,
            env=command_env(env, secrets=(config.api_key, config.token), keep=config.sandbox_pass_env),
            web=WebAccess.from_config(config.web_allow, config.mesh_url),
        ),
        sandbox=Sandbox(find_bwrap(config.sandbox_bwrap), hidden, config.sandbox_writable),
        network=config.sandbox_network,
    )
    if interactive:
        workspace.confirm = _terminal_confirm(sys.stderr)
    custom = load_custom_tools(list(config.tool_folders))
    servers = McpServers(config.mcp_servers, cwd)
    hooks = Hooks(config.hooks, cwd, session.id)
    agent = Agent(
        chat,
        mesh,
        system_prompt=prompt_text,
        max_turns=config.max_turns,
        workspace=workspace,
        store=store,
        session=session,
        hooks=hooks,
        context=ContextEngine(config.context_window, config.compact_at),
        custom_tools=custom,
    )
    if config.offline or args.prompt is None:
        render.err.write(_banner(config, session, resumed))
    for problem in unhidden:
        render.show(AgentEvent("notice", text=problem))
    if custom:
        render.show(AgentEvent("notice", text=f"custom tools: {', '.join(t.name for t in custom)}"))
    store.save(session)
    if hooks.has("session_start"):
        started = await hooks.fire("session_start", {"resumed": resumed, "agent_id": config.agent_id})
        for problem in started.problems:
            render.show(AgentEvent("notice", text=problem))
    try:
        served, problems = await servers.start()
        for problem in problems:
            render.show(AgentEvent("notice", text=problem))
        if served:
            agent.add_tools(served)
            render.show(AgentEvent("notice", text=f"MCP tools: {', '.join(t.mesh_name for t in served)}"))
        if args.prompt is not None:
            return 0 if await _one(agent, args.prompt, render) else 1
        return await _repl(agent, config, store, render, env)
    except MeshCredentialRefused as e:  # a mesh tool's call, refused before the run could say so
        render.show(AgentEvent("agent_error", text=str(e), is_error=True))
        return 1
    finally:
        await agent.flush()
        await servers.aclose()
        await chat.aclose()
        await mesh.aclose()
