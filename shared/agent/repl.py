"""The running agent behind `flux7 agent` (shared/agent/cli.py parses the command line, then comes here): the
session picked, the tools gathered, one prompt or the REPL, and how events are rendered.

The model's text goes to stdout as it streams; each tool call is shown on stderr (`→ tool {args}`, a command's
output as it comes, then `← policy · trace id` and the first lines of the result, an edit's diff), so `-p` output
stays scriptable. At a terminal the keyboard is shared/agent/terminal.py's: Ctrl-C or Esc ends a run, Ctrl-C at a
question is a no, twice on an empty prompt leaves.
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
from typing import Protocol, TextIO

from flux7.shared.agent.agent import DEFAULT_SYSTEM_PROMPT, Agent, Confirm, Question, Workspace
from flux7.shared.agent.asked import AskedCalls
from flux7.shared.agent.builtin_tools import ToolContext
from flux7.shared.agent.checkpoints import UndoRefused
from flux7.shared.agent.config import KEY_ENV, MEMORY_FILES, AgentConfig, ConfigError, agent_md_files
from flux7.shared.agent.context import ContextEngine
from flux7.shared.agent.cost import Prices
from flux7.shared.agent.custom_tools import load_custom_tools
from flux7.shared.agent.events import AgentEvent
from flux7.shared.agent.hooks import Hooks
from flux7.shared.agent.llm import DEFAULT_URLS, LLMError, make_chat
from flux7.shared.agent.mcp_servers import McpServers
from flux7.shared.agent.mesh_tools import MeshCredentialRefused, MeshTools, MeshUnavailable
from flux7.shared.agent.permissions import Permissions, parse_rule
from flux7.shared.agent.safety import MODES
from flux7.shared.agent.sandbox import Sandbox, command_env, find_bwrap, hidden_paths
from flux7.shared.agent.sessions import Session, SessionError, SessionStore
from flux7.shared.agent.status import status_line, unprefixed
from flux7.shared.agent.terminal import Keys
from flux7.shared.agent.web import WebAccess

__all__ = ["run", "status_line", "system_prompt"]  # status_line: shared/agent/status.py

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
  /config    each setting, its value and where it came from
  /usage     tokens used so far
  /cost      what this session's tokens cost (and the last prompt's)
  /permissions           the permission rules in force; /permissions remove N removes one
  /undo      put back the file the agent changed last
  /rewind [N]            list the prompts that changed files; with N, put back every change since prompt N
  /init      ask the model to write a starting AGENT.md for this repository
  /exit      leave (also /quit, end of input, or Ctrl-C twice on an empty line)
Ctrl-C or Esc ends the run in progress (a command is killed); Ctrl-C at a question answers no."""


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
        self._output_mid_line = False

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
            if event.diff:
                self.err.write(event.diff)
            self._say(f"? {event.tool} needs your confirmation: {event.text}")
        elif event.type == "tool_call_waiting":
            held = (
                f"approval {event.approval_id} is pending in the mesh" if event.approval_id else "waiting for the mesh"
            )
            self._say(f"… {held}: held for a human's approval; {event.text}" if event.text else f"… {held}")
        elif event.type == "tool_call_output":
            self.err.write(event.text)
            self.err.flush()
            self._output_mid_line = not event.text.endswith("\n")
        elif event.type == "tool_call_complete":
            self._complete(event)
        elif event.type == "text_complete":
            self._end_line()
        elif event.type == "agent_error":
            self._end_line()
            self._say(f"error: {unprefixed(event.text, 'error')}")
        elif event.type == "agent_interrupted":
            self._end_line()
            self._say("interrupted: back to the prompt (the model reads what happened with your next prompt)")

    def _complete(self, event: AgentEvent) -> None:
        if self._output_mid_line:
            self.err.write("\n")
            self._output_mid_line = False
        self._say(status_line(event))
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


def _question_line(question: Question) -> str:
    """`run <tool>? [y/N/a/t]`, after a line saying what `a` and `t` save."""
    options = [f"a: always allow {', '.join(question.rules)}"] if question.rules else []
    if question.rules != [question.tool]:
        options.append(f"t: always allow {question.tool}")
    keys = "y/N" + "".join("/" + o[0] for o in options)
    return (f"  ({' · '.join(options)})\n" if options else "") + f"  run {question.tool}? [{keys}] "


def _answer(line: str) -> str:
    word = line.strip().lower()
    return {"y": "yes", "yes": "yes", "a": "always", "always": "always", "t": "tool", "tool": "tool"}.get(word, "no")


def _terminal_confirm(err: TextIO, keys: Keys) -> Confirm:
    """Asks at the terminal, in the main thread, so Ctrl-C answers no at once. A local yes never resolves a mesh
    approval."""

    def ask(question: Question) -> None:
        err.write(_question_line(question))
        err.flush()

    async def confirm(question: Question) -> str:
        try:
            return _answer(keys.read_line("", ask=lambda: ask(question)))
        except (EOFError, KeyboardInterrupt):
            err.write("no\n")
            return "no"

    return confirm


def _piped_confirm(err: TextIO) -> Confirm:
    """Asks with input that is not a terminal: the answer is the next line."""

    async def confirm(question: Question) -> str:
        err.write(_question_line(question))
        err.flush()
        try:
            return _answer(await asyncio.to_thread(input))
        except EOFError:
            return "no"

    return confirm


async def _one(agent: Agent, prompt: str, render: Render, keys: Keys | None = None) -> str:
    """Run one prompt; how it ended: `agent_end`, `agent_error` or `agent_interrupted`."""
    ended = "agent_error"
    with keys.watching(agent.interrupt) if keys is not None else contextlib.nullcontext():
        async for event in agent.run(prompt):
            render.show(event)
            if event.type in ("agent_end", "agent_error", "agent_interrupted"):
                ended = event.type
    return ended


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


async def _read_prompt(prompt: str, more: str, keys: Keys | None) -> str:
    """One prompt: a line; lines ending in `\\` continue on the next; a line of `\"\"\"` opens a block that
    the next such line closes. At a terminal lines are read in the main thread (`keys`), so Ctrl-C reaches them."""

    async def line(text: str) -> str:
        return keys.read_line(text) if keys is not None and keys.tty else await asyncio.to_thread(input, text)

    first = await line(prompt)
    if first.strip() == '"""':
        lines: list[str] = []
        while (next_line := await line(more)).strip() != '"""':
            lines.append(next_line)
        return "\n".join(lines)
    parts = []
    while first.endswith("\\"):
        parts.append(first[:-1])
        first = await line(more)
    return "\n".join([*parts, first])


def _config_lines(config: AgentConfig) -> list[str]:
    """Each setting, its value (secrets masked) and where it came from."""
    lines = []
    for key, origin in sorted(config.origins.items()):
        value = config.values.get(key, "")
        if isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value) or "(none)"
        shown = "(not set)" if value in ("", None) else str(value)
        lines.append(f"{key:<20} {shown:<36} {origin}")
    key_origin = "env FLUX7_LLM_API_KEY" if config.api_key else "(none)"
    lines.append(f"{'api key':<20} {'****' + config.api_key[-4:] if config.api_key else '(none)':<36} {key_origin}")
    token = "****" + config.token[-4:] if config.token else f"agent:{config.agent_id}"
    lines.append(f"{'mesh token':<20} {token:<36} {'--token / MESH_AGENT_TOKEN' if config.token else 'default'}")
    return lines


def _init_prompt(cwd: Path) -> str:
    """What /init asks the model: a starting AGENT.md, from what the repository shows at a glance."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in cwd.iterdir() if not p.name.startswith("."))[:60]
    known = [
        n for n in ("pyproject.toml", "package.json", "Makefile", "Cargo.toml", "go.mod", "README.md") if n in names
    ]
    existing = next((n for n in MEMORY_FILES if (cwd / n).is_file()), "")
    task = (
        f"Improve the existing {existing} and write the result to AGENT.md"
        if existing
        else "Write a starting AGENT.md at the repository root"
    )
    return (
        f"{task}: the instructions a coding agent needs in this repository. Look at the files first (read "
        f"{', '.join(known) or 'the main files'}, list the source folders). Cover: what the project is, how to "
        "build, test and lint it (the exact commands), the layout, the conventions to follow, and what not to "
        f"touch. Keep it short and concrete; no generic advice. The top level holds: {', '.join(names)}."
    )


def _cost_text(agent: Agent) -> str:
    session = agent.session
    if session is None or (agent.prices.of(agent.provider, agent.chat.model) is None and not session.cost_usd):
        return f'no price for {agent.chat.model}: add [prices."{agent.chat.model}"] input/output to agent.toml'
    last = f"last prompt ${agent.cost_prompt:.4f} · " if agent.cost_prompt is not None else ""
    used = f"{agent.usage.get('input_tokens', 0)} in / {agent.usage.get('output_tokens', 0)} out"
    return f"{last}session ${session.cost_usd:.4f} ({used} tokens)"


async def _command(
    word: str, rest: str, agent: Agent, config: AgentConfig, store: SessionStore, render: Render, keys: Keys | None
) -> bool:
    """A REPL command other than the ones that change the session or leave; False when `word` is none."""
    out, err = render.out, render.err
    if word == "/permissions":
        rules = agent.permissions.rules if agent.permissions is not None else []
        parts = rest.split()
        if parts[:1] == ["remove"] and len(parts) == 2 and parts[1].isdigit() and 1 <= int(parts[1]) <= len(rules):
            assert agent.permissions is not None
            try:
                gone = agent.permissions.remove(int(parts[1]))
            except (OSError, ValueError) as e:
                err.write(f"error: cannot remove it: {e}\n")
                return True
            out.write(f"removed {gone.action} {gone.text} from {gone.source}\n")
        elif parts:
            err.write("usage: /permissions, or /permissions remove N\n")
        elif not rules:
            out.write("no permission rules ([permissions] allow/deny in agent.toml, or answer a question with a)\n")
        for n, rule in enumerate(rules, 1):
            if not parts:
                out.write(f"{n:>3}. {rule.action:<5} {rule.text:<40} {rule.source}\n")
    elif word == "/undo":
        points = agent.checkpoints
        try:
            undone = points.undo() if points is not None else None
        except (UndoRefused, OSError) as e:
            err.write(f"error: {e}\n")
            return True
        if undone is None:
            out.write("nothing to undo\n")
        else:
            agent._save()
            agent.note = f"the user undid your {undone['tool']} of {undone['shown']}: it is as it was before it"
            out.write(f"undone: {undone['tool']} of {undone['shown']} (prompt {undone['point']})\n")
    elif word == "/rewind":
        points = agent.checkpoints
        listed = points.points() if points is not None else []
        if not rest.strip():
            if not listed:
                out.write("no changes to rewind\n")
            for n, prompt, files in listed:
                out.write(f"{n:>3}. {prompt!r}: {', '.join(files)}\n")
            if listed:
                out.write("/rewind N puts every file back as it was before prompt N\n")
        elif not rest.strip().isdigit():
            err.write("usage: /rewind [N]\n")
        else:
            assert points is not None
            try:
                rewound = points.rewind(int(rest.strip()))
            except (UndoRefused, OSError) as e:
                agent._save()
                err.write(f"error: {e}\n")
                return True
            agent._save()
            files = sorted({u["shown"] for u in rewound})
            if files:
                agent.note = (
                    f"the user put these files back as they were before prompt {rest.strip()}: {', '.join(files)}"
                )
            out.write(f"rewound {len(rewound)} changes: {', '.join(files) or 'none'}\n")
    elif word == "/cost":
        out.write(_cost_text(agent) + "\n")
    elif word == "/init":
        await _one(agent, _init_prompt(agent.workspace.cwd if agent.workspace else Path.cwd()), render, keys)
    else:
        return False
    return True


async def _repl(
    agent: Agent, config: AgentConfig, store: SessionStore, render: Render, env: Mapping[str, str], keys: Keys | None
) -> int:
    render.err.write("/help for commands\n")
    tty = keys is not None and keys.tty
    prompt, more = ("flux7> ", "...    ") if tty else ("", "")  # piped input gets no prompts in its output
    if tty:
        _history(config)
    session = agent.session
    assert session is not None
    armed = False  # Ctrl-C on an empty line once: the next one leaves
    while True:
        try:
            line = await _read_prompt(prompt, more, keys)
        except EOFError:
            render.out.write("\n")
            return 0
        except KeyboardInterrupt:
            if keys is not None and keys.interrupted_empty:
                if armed:
                    render.err.write("\n")
                    return 0
                armed = True
                render.err.write("\n(Ctrl-C again to leave, or /exit)\n")
            else:
                render.err.write("\n")
            continue
        armed = False
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
                agent.chat = make_chat(
                    provider,
                    model or old_chat.model,
                    api_key=key,
                    temperature=config.temperature,
                    timeout=config.llm_timeout,
                )
                await old_chat.aclose()
                session.provider = agent.provider = provider
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
            for text in _config_lines(config):
                render.out.write(text + "\n")
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
        elif await _command(word, rest, agent, config, store, render, keys):
            pass
        elif word.startswith("/"):
            render.err.write(f"unknown command {word} (/help lists them)\n")
        else:
            await _one(agent, line, render, keys)
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
        config.provider,
        config.model,
        url=config.llm_url,
        api_key=config.api_key,
        temperature=config.temperature,
        timeout=config.llm_timeout,
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
    keys = Keys(asyncio.get_running_loop(), tty=sys.stdin.isatty())
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
        workspace.confirm = _terminal_confirm(sys.stderr, keys) if keys.tty else _piped_confirm(sys.stderr)
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
        permissions=Permissions(
            [parse_rule(text, action, source) for action, text, source in config.permission_rules],
            config.workspace,
            (config.project_file or config.workspace / ".flux7" / "agent.toml")
            if config.trusted and config.project_file is not None
            else config.user_file,
        ),
        asked=None if config.offline else AskedCalls(config.sessions_dir / "asked", config.mesh_url),
        prices=Prices(config.prices),
        provider=config.provider,
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
    keys.install()
    try:
        await _settle(agent, render)  # calls an earlier run asked for and never ran: reported as not run
        served, problems = await servers.start()
        for problem in problems:
            render.show(AgentEvent("notice", text=problem))
        if served:
            agent.add_tools(served)
            render.show(AgentEvent("notice", text=f"MCP tools: {', '.join(t.mesh_name for t in served)}"))
        if args.prompt is not None:
            ended = await _one(agent, args.prompt, render, keys)
            return {"agent_end": 0, "agent_interrupted": 130}.get(ended, 1)
        return await _repl(agent, config, store, render, env, keys)
    except MeshCredentialRefused as e:  # a mesh tool's call, refused before the run could say so
        render.show(AgentEvent("agent_error", text=str(e), is_error=True))
        return 1
    finally:
        keys.uninstall()
        await _settle(agent, render)
        await agent.flush()
        await servers.aclose()
        await chat.aclose()
        await mesh.aclose()


async def _settle(agent: Agent, render: Render) -> None:
    """Report the calls this agent asked the mesh about and never ran (the agent died, was interrupted, or a call
    is still held for approval) as not run, so the trail does not show them as done."""
    if agent.asked is None:
        return
    try:
        taken = await agent.asked.settle(agent.mesh)
    except Exception as e:  # never in the way of starting or leaving
        render.show(AgentEvent("notice", text=f"could not report calls that did not run: {e}"))
        return
    if taken:
        render.show(AgentEvent("notice", text=f"told the mesh that {len(taken)} call(s) it released never ran"))
