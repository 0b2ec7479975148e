"""The agent's own tools, run in its process on the user's machine, relative to the working directory.

Each has a JSON Schema the model sees and `jsonschema` checks the arguments against before anything runs, and a
`mutating` flag the safety layer reads. Running one returns a `ToolRun`: the text the model reads, whether it
failed, and what the mesh is told afterwards (exit code, output size). A `ToolContext` carries the rest: the
shell's limits, sandbox and environment, what is hidden, web_fetch's outbound allow-list.

`grep` and `glob` open only files that resolve inside the working folder (or the folder searched) and outside
every hidden path: a symlink in a cloned repository cannot lead them out. `shell` runs in the OS sandbox
(shared/agent/sandbox.py) when the context has one; `web_fetch` goes through the outbound guard
(shared/agent/web.py).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import difflib
import os
import re
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec
from jsonschema import Draft202012Validator

from flux7.shared.agent.commands import under
from flux7.shared.agent.sandbox import Sandbox
from flux7.shared.agent.web import MESH_ITSELF, WebAccess, fetch

__all__ = [
    "BUILTINS",
    "SUBAGENT_DEFAULT_TOOLS",
    "SUBAGENT_PROMPT",
    "Builtin",
    "FileChange",
    "HeadAndTail",
    "ToolContext",
    "ToolFailed",
    "ToolRun",
    "plan_change",
    "validation_error",
]

SUBAGENT_DEFAULT_TOOLS = ("read_file", "list_dir", "glob", "grep")
SUBAGENT_PROMPT = (
    "You are {name}, a sub-agent working in the directory {cwd} for another agent, which gave you one task. "
    "Use your tools to do it, then answer with what the other agent needs to know, concisely. Every tool call "
    "goes through a governance mesh that may refuse it; do not try to get around a refusal: report it."
)

_MAX_OUTPUT = 30_000  # characters of one result the model reads
_MAX_MATCHES = 500
_MAX_FILE = 5_000_000  # bytes a read, edit or grep will open


_MAX_PREVIEW = 64 * 1024  # bytes of a diff sent to the mesh with /decide


@dataclass(frozen=True)
class FileChange:
    """What a write_file or edit_file call changes: the file's bytes before (None: it did not exist) and after,
    and the unified diff of its text (line endings shown as newlines)."""

    path: Path  # resolved
    shown: str  # the path as the model named it
    before: bytes | None
    after: bytes
    diff: str

    def preview(self, cwd: Path) -> dict[str, str]:
        """The `preview` sent with `/decide`: the diff, cut with a marker so that it and the path fit in 64 KiB
        (the mesh refuses more)."""
        rel = self.path.relative_to(cwd.resolve()).as_posix() if self.path.is_relative_to(cwd.resolve()) else self.shown
        data = self.diff.encode()
        room = _MAX_PREVIEW - len(rel.encode())
        if len(data) <= room:
            return {"kind": "diff", "path": rel, "diff": self.diff}
        kept = data[: room - 120].decode("utf-8", "ignore")
        marker = f"\n[... diff truncated: {len(data) - len(kept.encode()):,} more bytes not shown]\n"
        return {"kind": "diff", "path": rel, "diff": kept + marker}


@dataclass(frozen=True)
class ToolRun:
    content: str
    is_error: bool = False
    exit_code: int | None = None
    diff: str = ""  # an edit's unified diff, for the terminal to show
    change: FileChange | None = None  # what a write or an edit changed, for the checkpoints


@dataclass(frozen=True)
class ToolContext:
    """What running a tool needs besides its arguments and the working folder."""

    timeout: float = 120.0  # the shell's longest run, seconds
    output_limit: int = _MAX_OUTPUT  # characters of a command's output the model reads
    hidden: tuple[Path, ...] = ()  # resolved paths no tool opens (secrets, the mesh's data)
    env: Mapping[str, str] | None = None  # a shell command's environment (None: this process's)
    sandbox: Sandbox | None = None  # the shell's sandbox; None runs commands bare (only ever after a yes)
    writable: bool = True  # the working folder is writable in the sandbox (not in read-only mode)
    network: bool = False  # the sandboxed command may use the network
    web: WebAccess = field(default_factory=WebAccess)
    # a command's output as it comes (awaited: a slow reader slows the command down instead of filling memory)
    output: Callable[[str], Awaitable[None]] | None = None
    planned: FileChange | None = None  # a write or an edit as shown and approved: written only if the file is unchanged


Runner = Callable[[dict[str, Any], Path, ToolContext], Awaitable[ToolRun]]


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    parameters: dict[str, Any]
    mutating: bool
    run: Runner
    governed_as: str = ""  # the name the mesh decides it under, when not `name` (an MCP server's `<server>.<tool>`)
    needs_mesh: bool = False  # runs only on the mesh's allow: refused offline or when the mesh cannot be asked

    @property
    def mesh_name(self) -> str:
        return self.governed_as or self.name


def validation_error(schema: dict[str, Any], arguments: Any) -> str:
    """The first reason `arguments` do not fit `schema`, or "" when they do."""
    errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return ""
    where = "/".join(str(p) for p in errors[0].path)
    return f"{where + ': ' if where else ''}{errors[0].message}"


class ToolFailed(Exception):
    """What the model reads when a tool could not do what was asked."""


def _resolve(cwd: Path, path: str) -> Path:
    return (cwd / os.path.expanduser(path)).resolve()


def _clip(text: str, limit: int = _MAX_OUTPUT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class _Text:
    """A file's text as it is on disk: no newline translation, with its encoding and byte-order mark."""

    text: str
    encoding: str
    bom: bytes = b""

    def encode(self, text: str, shown: str) -> bytes:
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError as e:
            raise ToolFailed(
                f"the new text cannot be written in {shown}'s encoding ({self.encoding}): {e.reason}"
            ) from e


def _decode(data: bytes, shown: str) -> _Text:
    """UTF-8 (with or without a BOM), UTF-16/32 with a BOM, else Latin-1 (every byte kept as it was)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return _Text(data[len(bom) :].decode(encoding), encoding, bom)
            except UnicodeDecodeError as e:
                raise ToolFailed(f"{shown} is not {encoding} text") from e
    if b"\x00" in data[:8192]:
        raise ToolFailed(f"{shown} is a binary file")
    try:
        return _Text(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        return _Text(data.decode("latin-1"), "latin-1")


def _read_file_text(path: Path, shown: str) -> _Text:
    if not path.is_file():
        raise ToolFailed(f"{path} is not a file")
    if path.stat().st_size > _MAX_FILE:
        raise ToolFailed(f"{path} is larger than {_MAX_FILE} bytes")
    return _decode(path.read_bytes(), shown)


def _read_text(path: Path) -> str:
    return _read_file_text(path, str(path)).text


def _diff(path: str, before: str, after: str) -> str:
    before, after = before.replace("\r\n", "\n"), after.replace("\r\n", "\n")
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _guarded(fn: Callable[[dict[str, Any], Path, ToolContext], ToolRun]) -> Runner:
    async def run(arguments: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
        try:
            return await asyncio.to_thread(fn, arguments, cwd, ctx)
        except ToolFailed as e:
            return ToolRun(f"error: {e}", is_error=True)
        except OSError as e:
            return ToolRun(f"error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), is_error=True)

    return run


def _read_file(a: dict[str, Any], cwd: Path, _ctx: ToolContext) -> ToolRun:
    lines = _read_file_text(_resolve(cwd, a["path"]), a["path"]).text.splitlines()
    first = int(a.get("start_line") or 1)
    last = int(a.get("end_line") or len(lines))
    if first > max(len(lines), 1) or last < first:
        raise ToolFailed(f"lines {first}-{last} are not in the file ({len(lines)} lines)")
    shown = [f"{n:>6}\t{lines[n - 1]}" for n in range(first, min(last, len(lines)) + 1)]
    return ToolRun(_clip("\n".join(shown)))


def _crlf(text: str) -> bool:
    """Whether the file's lines end in CRLF (most of them)."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def plan_change(tool: str, a: dict[str, Any], cwd: Path) -> FileChange:
    """What a write_file or edit_file call would write, computed without writing: the file's encoding, byte-order
    mark and line endings kept (the model writes newlines; a CRLF file gets CRLF). ToolFailed says why it cannot."""
    shown = a["path"]
    path = _resolve(cwd, shown)
    if tool == "write_file":
        if path.exists():
            old = _read_file_text(path, shown)
            before: bytes | None = path.read_bytes()
            content = a["content"]
            if _crlf(old.text) and "\r\n" not in content:
                content = content.replace("\n", "\r\n")
            after = old.encode(content, shown)
            return FileChange(path, shown, before, after, _diff(shown, old.text, content))
        return FileChange(path, shown, None, a["content"].encode(), _diff(shown, "", a["content"]))
    old = _read_file_text(path, shown)
    text = old.text
    find, put = a["old_text"], a["new_text"]
    if not find:
        raise ToolFailed("old_text is empty")
    count = text.count(find)
    if count == 0 and "\r\n" in text and "\n" in find:
        # The model writes newlines; the file has CRLF: match and replace in the file's own line endings.
        crlf_find = find.replace("\r\n", "\n").replace("\n", "\r\n")
        if text.count(crlf_find):
            find, put = crlf_find, put.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(find)
    if count == 0:
        raise ToolFailed(f"old_text was not found in {shown} (it must match exactly, whitespace included)")
    if count > 1 and not a.get("replace_all"):
        raise ToolFailed(f"old_text occurs {count} times in {shown}: add context, or set replace_all")
    if "\n" in put and "\r\n" not in put and _crlf(text):
        put = put.replace("\n", "\r\n")
    edited = text.replace(find, put) if a.get("replace_all") else text.replace(find, put, 1)
    return FileChange(path, shown, path.read_bytes(), old.encode(edited, shown), _diff(shown, text, edited))


def _planned(tool: str, a: dict[str, Any], cwd: Path, ctx: ToolContext) -> FileChange:
    """The change to write: the one shown for approval when there was one, provided the file is still as it was
    then (someone may have edited it while the approval was pending); computed now otherwise."""
    change = ctx.planned
    if change is None or change.path != _resolve(cwd, a["path"]):
        return plan_change(tool, a, cwd)
    now = change.path.read_bytes() if change.path.exists() else None
    if now != change.before:
        raise ToolFailed(
            f"{change.shown} changed since this edit was shown for approval; nothing was written (read it again)"
        )
    return change


def _write_file(a: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
    change = _planned("write_file", a, cwd, ctx)
    change.path.parent.mkdir(parents=True, exist_ok=True)
    change.path.write_bytes(change.after)
    return ToolRun(f"wrote {len(change.after)} bytes to {a['path']}", diff=change.diff, change=change)


def _edit_file(a: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
    change = _planned("edit_file", a, cwd, ctx)
    change.path.write_bytes(change.after)
    count = "every occurrence replaced" if a.get("replace_all") else "1 replacement"
    return ToolRun(f"edited {a['path']} ({count})\n{change.diff}", diff=change.diff, change=change)


def _list_dir(a: dict[str, Any], cwd: Path, _ctx: ToolContext) -> ToolRun:
    path = _resolve(cwd, a.get("path") or ".")
    if not path.is_dir():
        raise ToolFailed(f"{a.get('path') or '.'} is not a directory")
    entries = sorted(path.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    return ToolRun(_clip("\n".join(p.name + ("/" if p.is_dir() else "") for p in entries)) or "(empty)")


def _ignored(root: Path) -> pathspec.GitIgnoreSpec:
    """The .gitignore rules at `root` (and .git itself), as gitwildmatch patterns."""
    lines = [".git/"]
    ignore = root / ".gitignore"
    if ignore.is_file():
        lines += ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _opens(path: Path, roots: tuple[Path, ...], hidden: tuple[Path, ...]) -> bool:
    """Whether a walk may open `path`: it resolves inside one of `roots` and outside every hidden path (a symlink
    does not lead out)."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return False
    return any(under(resolved, r) for r in roots) and not any(under(resolved, h) for h in hidden)


def _files(base: Path, roots: tuple[Path, ...] = (), hidden: tuple[Path, ...] = ()) -> Iterator[Path]:
    """Files under `base` that a walk may open (`_opens`), skipping what .gitignore files (at base and below)
    ignore."""
    roots = roots or (base.resolve(),)
    specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
    for here, dirs, files in os.walk(base):
        folder = Path(here)
        if (folder / ".gitignore").is_file() or folder == base:
            specs.append((folder, _ignored(folder)))

        def kept(p: Path, is_dir: bool) -> bool:
            for root, spec in specs:
                if p.is_relative_to(root):
                    rel = p.relative_to(root).as_posix() + ("/" if is_dir else "")
                    if spec.match_file(rel):
                        return False
            return True

        dirs[:] = sorted(d for d in dirs if kept(folder / d, True) and _opens(folder / d, roots, hidden))
        for name in sorted(files):
            if kept(folder / name, False) and _opens(folder / name, roots, hidden):
                yield folder / name


def _roots(cwd: Path, base: Path) -> tuple[Path, ...]:
    """Where a walk's files may resolve: the working folder, and the folder searched (a path outside the working
    folder passed the local gate already)."""
    return (cwd.resolve(), base.resolve())


def _glob(a: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
    base = _resolve(cwd, a.get("path") or ".")
    spec = pathspec.GitIgnoreSpec.from_lines([a["pattern"]])
    walk = _files(base, _roots(cwd, base), ctx.hidden)
    found = [p.relative_to(base).as_posix() for p in walk if spec.match_file(p.relative_to(base).as_posix())]
    more = f"\n[... {len(found) - _MAX_MATCHES} more]" if len(found) > _MAX_MATCHES else ""
    return ToolRun("\n".join(found[:_MAX_MATCHES]) + more if found else "no files match")


def _grep(a: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
    try:
        pattern = re.compile(a["pattern"], re.IGNORECASE if a.get("ignore_case") else 0)
    except re.error as e:
        raise ToolFailed(f"not a regular expression: {e}") from e
    base = _resolve(cwd, a.get("path") or ".")
    only = pathspec.GitIgnoreSpec.from_lines([a["glob"]]) if a.get("glob") else None
    candidates = [base] if base.is_file() else list(_files(base, _roots(cwd, base), ctx.hidden))
    hits: list[str] = []
    for path in candidates:
        shown = path.relative_to(cwd).as_posix() if path.is_relative_to(cwd) else str(path)
        if only is not None and not only.match_file(path.name) and not only.match_file(shown):
            continue
        try:
            real = path.resolve()  # the file checked is the file opened, not a link that may move meanwhile
            if not _opens(real, _roots(cwd, base), ctx.hidden) or real.stat().st_size > _MAX_FILE:
                continue
            text = real.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: not searched
        for n, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{shown}:{n}: {line[:300]}")
                if len(hits) > _MAX_MATCHES:
                    break
    if not hits:
        return ToolRun("no matches")
    more = "\n[... more matches cut]" if len(hits) > _MAX_MATCHES else ""
    return ToolRun(_clip("\n".join(hits[:_MAX_MATCHES]) + more))


class HeadAndTail:
    """A command's output kept bounded: its first and last `limit / 2` characters, and how much went between."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = ""
        self.tail = ""
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        room = self.half - len(self.head)
        if room > 0:
            self.head += text[:room]
            text = text[room:]
        if text:
            self.tail = (self.tail + text)[-self.half :]

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        if cut <= 0:
            return self.head + self.tail
        return (
            f"{self.head}\n[... {cut:,} characters of output cut here ({self.total:,} in all): the first "
            f"{len(self.head):,} and the last {len(self.tail):,} are shown ...]\n{self.tail}"
        )


async def _shell(a: dict[str, Any], cwd: Path, ctx: ToolContext) -> ToolRun:
    """The command in the sandbox, its output passed on as it comes (`ctx.output`) and kept bounded; killed with
    what it started at its timeout, or when the run is cancelled (the user interrupted it: re-raised)."""
    where = _resolve(cwd, a.get("cwd") or ".")
    if not where.is_dir():
        return ToolRun(f"error: {a.get('cwd')} is not a directory", is_error=True)
    timeout = min(float(a.get("timeout") or ctx.timeout), ctx.timeout)
    argv = ["/bin/sh", "-c", a["command"]]
    env = dict(ctx.env) if ctx.env is not None else None
    if ctx.sandbox is not None:
        argv = ctx.sandbox.argv(argv, root=cwd.resolve(), where=where, writable=ctx.writable, network=ctx.network)
        if env is not None:
            env["TMPDIR"] = "/tmp"  # the sandbox's own, empty and writable
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=where,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # its own process group: a timeout kills what it started too
    )
    kept = HeadAndTail(ctx.output_limit)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            text = decoder.decode(chunk)
            kept.add(text)
            if ctx.output is not None and text:
                await ctx.output(text)
        kept.add(decoder.decode(b"", final=True))
        await proc.wait()

    def kill() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    try:
        await asyncio.wait_for(pump(), timeout)
    except TimeoutError:
        kill()
        await proc.wait()
        text = f"error: the command timed out after {timeout:g} s and was killed; its output until then:\n"
        return ToolRun(text + kept.text(), is_error=True, exit_code=proc.returncode)
    except asyncio.CancelledError:  # the user interrupted it: killed here, said by the agent
        kill()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(proc.wait())
        raise
    code = proc.returncode if proc.returncode is not None else -1
    return ToolRun(f"exit code {code}\n{kept.text()}", is_error=code != 0, exit_code=code)


async def _web_fetch(a: dict[str, Any], _cwd: Path, ctx: ToolContext) -> ToolRun:
    import httpx

    from flux7.shared.errors import OutboundRefused

    url = a["url"]
    if not url.startswith(("http://", "https://")):
        return ToolRun("error: only http and https URLs are fetched", is_error=True)
    try:
        status, kind, text, _ = await asyncio.to_thread(fetch, ctx.web, url)
    except OutboundRefused as e:
        hint = (
            ""
            if e.message.endswith(MESH_ITSELF)
            else " (web_fetch reaches public addresses; web_fetch.allow opens others)"
        )
        return ToolRun(f"refused: {url}: {e.message}{hint}", is_error=True)
    except httpx.HTTPError as e:
        return ToolRun(f"error: {url}: {e.__class__.__name__}: {e}", is_error=True)
    shown = f"HTTP {status} {kind}".strip()
    return ToolRun(f"{shown}\n{_clip(text, ctx.output_limit)}", is_error=status >= 400)


async def _no_direct_run(_a: dict[str, Any], _cwd: Path, _ctx: ToolContext) -> ToolRun:
    return ToolRun("error: task runs through the agent", is_error=True)  # the agent runs sub-agents itself


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH = {"type": "string", "minLength": 1, "description": "a path relative to the working directory"}
_LINE = {"type": "integer", "minimum": 1}

BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in [
        Builtin(
            "read_file",
            "Read a text file, with line numbers; start_line and end_line (1-based, inclusive) read a range.",
            _schema({"path": _PATH, "start_line": _LINE, "end_line": _LINE}, ["path"]),
            False,
            _guarded(_read_file),
        ),
        Builtin(
            "write_file",
            "Create or overwrite a text file with the given content (parent folders are created).",
            _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
            True,
            _guarded(_write_file),
        ),
        Builtin(
            "edit_file",
            "Replace old_text with new_text in a file. old_text must match exactly once (whitespace included) "
            "unless replace_all is true. Answers the unified diff.",
            _schema(
                {
                    "path": _PATH,
                    "old_text": {"type": "string", "minLength": 1},
                    "new_text": {"type": "string"},
                    "replace_all": {"type": "boolean"},
                },
                ["path", "old_text", "new_text"],
            ),
            True,
            _guarded(_edit_file),
        ),
        Builtin(
            "list_dir",
            "List a directory (folders end with /).",
            _schema({"path": _PATH}, []),
            False,
            _guarded(_list_dir),
        ),
        Builtin(
            "glob",
            "Find files by a glob pattern such as **/*.py (files .gitignore ignores are left out).",
            _schema({"pattern": {"type": "string", "minLength": 1}, "path": _PATH}, ["pattern"]),
            False,
            _guarded(_glob),
        ),
        Builtin(
            "grep",
            "Search file contents for a regular expression; answers path:line: text (respects .gitignore). "
            "glob narrows the files searched.",
            _schema(
                {
                    "pattern": {"type": "string", "minLength": 1},
                    "path": _PATH,
                    "glob": {"type": "string", "minLength": 1},
                    "ignore_case": {"type": "boolean"},
                },
                ["pattern"],
            ),
            False,
            _guarded(_grep),
        ),
        Builtin(
            "task",
            "Hand a self-contained task to a sub-agent with its own conversation: it works with the tools you "
            "give it (default: read_file, list_dir, glob, grep) and answers with its findings. name identifies "
            "it (the mesh sees it as <this agent>/<name>).",
            _schema(
                {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"},
                    "prompt": {"type": "string", "minLength": 1},
                    "tools": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                },
                ["name", "prompt"],
            ),
            False,  # its own calls pass both gates as the sub-agent's
            _no_direct_run,
        ),
        Builtin(
            "web_fetch",
            "Fetch a web page or file over http(s) and answer its text (HTML reduced to text). Runs only when the "
            "mesh allows it.",
            _schema({"url": {"type": "string", "minLength": 8, "maxLength": 2048}}, ["url"]),
            False,
            _web_fetch,
            needs_mesh=True,
        ),
        Builtin(
            "shell",
            "Run a shell command (/bin/sh -c) in the working directory, or in cwd below it; answers the exit "
            "code and the output (stdout and stderr together). timeout is in seconds.",
            _schema(
                {
                    "command": {"type": "string", "minLength": 1},
                    "cwd": _PATH,
                    "timeout": {"type": "number", "exclusiveMinimum": 0},
                },
                ["command"],
            ),
            True,
            _shell,
        ),
    ]
}
