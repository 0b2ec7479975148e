"""The markdown workspace (CONTRACT 2.4): entry format, body escaping, and the tolerant parser.

Files are read as bytes so that entry spans are exact byte ranges (the journal and crash recovery rely on
that); text is decoded with surrogateescape so stray bytes survive a round trip and seal as Go would.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from flux7.shared.memory.times import parse_rfc3339, rfc3339

__all__ = [
    "DEFAULT_PREDICATE",
    "LONG_TERM_FILE",
    "LONG_TERM_HEADER",
    "LONG_TERM_TAG",
    "Entry",
    "Parsed",
    "daily_file",
    "escape_body",
    "format_entry",
    "go_trim",
    "list_daily_files",
    "list_workspace_files",
    "parse_entries",
    "unescape_body",
]

DEFAULT_PREDICATE = "note"
ENVELOPE_OPEN = "```mem7"
ENVELOPE_END = "```"
ENTRY_SEP = "---"
MEMORY_SUBDIR = "memory"
# Long-term memory (CONTRACT 2.4 reserves the file): entries there never expire. The tag marks them in every
# output and lets any client, the published SDK included, ask for one.
LONG_TERM_FILE = "MEMORY.md"
LONG_TERM_TAG = "long-term"
# Written when the workspace is created. It must parse as no entries: no line may start with `## `.
LONG_TERM_HEADER = (
    b"# MEMORY.md: long-term memory\n"
    b"\n"
    b"mem7 keeps long-term memories here: entries stored with `long_term: true` or the tag `long-term`.\n"
    b"They never expire and `mem7 prune` leaves them alone; they are indexed and searched like the daily\n"
    b"files in memory/, and sealed into the same hash chain. Write them with memory_store, not by hand:\n"
    b"an edit breaks the chain (`mem7 verify`).\n"
)

# Go's unicode.IsSpace set: what strings.TrimSpace removes.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + ("\u2028\u2029\u202f\u205f\u3000")
# A body line that could be read as structure once its leading backslashes are ignored. Escaping every
# such line (a superset of the reference's rule) makes escaping reversible, so the index can hold the
# value exactly as stored and a rescan gives it back unchanged.
_MARKER_LIKE = re.compile(rf"[{_GO_SPACE}\\]*(?:---|```mem7|```)[{_GO_SPACE}]*")


def go_trim(text: str) -> str:
    return text.strip(_GO_SPACE)


class Entry(msgspec.Struct, kw_only=True):
    """One workspace entry as parsed (times are epoch seconds; None where absent or unparsable)."""

    op: str = ""
    entity: str = ""
    predicate: str = ""
    agent: str = ""
    trace: str = ""
    tags: list[str] = msgspec.field(default_factory=list)
    ttl: int = 0
    created: int | None = None
    updated: int | None = None
    deleted: int | None = None
    valid_from: int | None = None
    valid_to: int | None = None
    prev: str = ""
    hash: str = ""
    body: str = ""  # as in the file: escapes kept
    file: str = ""  # workspace-relative, e.g. memory/2026-10-03.md
    line: int = 0  # 1-based line of the heading
    start: int = 0  # byte span in the file, from the end of the previous entry to the end of its `---`
    end: int = 0

    @property
    def when(self) -> int:
        if self.op in ("delete", "delete_tags") and self.deleted is not None:
            return self.deleted
        return self.updated if self.updated is not None else (self.created or 0)

    @property
    def value(self) -> str:
        return unescape_body(self.body)


class Parsed(msgspec.Struct):
    entries: list[Entry]
    rest: int  # offset where the bytes after the last complete entry start
    torn: bool  # those bytes hold the beginning of an entry (a heading) that never ended


def daily_file(epoch: int) -> str:
    return f"{MEMORY_SUBDIR}/{datetime.fromtimestamp(epoch, UTC):%Y-%m-%d}.md"


def list_daily_files(workspace: Path) -> list[str]:
    """Workspace-relative daily files in lexical (= chronological) order."""
    directory = workspace / MEMORY_SUBDIR
    if not directory.is_dir():
        return []
    names = (p.name for p in directory.iterdir() if p.suffix == ".md" and p.is_file())
    return sorted(f"{MEMORY_SUBDIR}/{name}" for name in names)


def list_workspace_files(workspace: Path) -> list[str]:
    """The daily files in order, then MEMORY.md when it exists: every file that holds entries."""
    names = list_daily_files(workspace)
    if (workspace / LONG_TERM_FILE).is_file():
        names.append(LONG_TERM_FILE)
    return names


def escape_body(body: str) -> str:
    return "\n".join("\\" + line if _MARKER_LIKE.fullmatch(line) else line for line in body.split("\n"))


def unescape_body(body: str) -> str:
    return "\n".join(
        line[1:] if line.startswith("\\") and _MARKER_LIKE.fullmatch(line[1:]) else line for line in body.split("\n")
    )


def format_entry(e: Entry) -> str:
    """The block appended to a daily file (`e.body` is the value, escaped here); it starts with a blank line
    and ends with `---\\n`."""
    ts = rfc3339
    heading = f"[delete-tags: {', '.join(e.tags)}]" if e.op == "delete_tags" else e.entity
    env = [f"op: {e.op}"]
    if e.op == "store" and e.predicate and e.predicate != DEFAULT_PREDICATE:
        env.append(f"predicate: {e.predicate}")
    if e.agent:
        env.append(f"agent: {e.agent}")
    if e.trace:
        env.append(f"trace: {e.trace}")
    if e.op == "store":
        if e.tags:
            env.append(f"tags: {', '.join(e.tags)}")
        if e.ttl > 0:
            env.append(f"ttl: {e.ttl}")
        env.append(f"created: {ts(e.created or 0)}")
        env.append(f"updated: {ts(e.updated or 0)}")
        if e.valid_from is not None:
            env.append(f"valid_from: {ts(e.valid_from)}")
        if e.valid_to is not None:
            env.append(f"valid_to: {ts(e.valid_to)}")
    else:
        if e.op == "delete_tags":
            env.append(f"tags: {', '.join(e.tags)}")
        env.append(f"deleted: {ts(e.deleted or 0)}")
    if e.prev:
        env.append(f"prev: {e.prev}")
    if e.hash:
        env.append(f"hash: {e.hash}")
    block = f"\n## {heading}\n\n{ENVELOPE_OPEN}\n" + "\n".join(env) + f"\n{ENVELOPE_END}\n\n"
    if e.op == "store":
        block += escape_body(e.body)
        if not e.body.endswith("\n"):
            block += "\n"
        block += "\n"
    return block + ENTRY_SEP + "\n"


def _envelope_line(e: Entry, line: str) -> None:
    key, sep, raw = line.partition(":")
    if not sep:
        return
    key, val = go_trim(key), go_trim(raw)
    if key in ("op", "predicate", "agent", "trace", "prev", "hash"):
        setattr(e, key, val)
    elif key == "tags":
        if val:
            e.tags = [t for t in (go_trim(p) for p in val.split(",")) if t]
    elif key == "ttl":
        m = re.match(r"[+-]?\d+", val)
        if m:
            e.ttl = int(m.group(0))
    elif key in ("created", "updated", "deleted", "valid_from", "valid_to"):
        moment = parse_rfc3339(val)
        if moment is not None:
            setattr(e, key, moment)


def parse_entries(data: bytes, file: str = "", *, first_line: int = 1) -> Parsed:
    """Parse entries as the reference's state machine does: heading, envelope, body up to `---`."""
    entries: list[Entry] = []
    state = "idle"
    current = Entry()
    body: list[str] = []
    chunk_start = 0
    pos, line_no, size = 0, first_line - 1, len(data)
    while pos < size:
        nl = data.find(b"\n", pos)
        nxt = size if nl < 0 else nl + 1
        raw = data[pos : size if nl < 0 else nl]
        pos = nxt
        line_no += 1
        line = raw.decode("utf-8", "surrogateescape")
        if line.endswith("\r"):
            line = line[:-1]
        if state == "idle":
            if line.startswith("## "):
                current = Entry(entity=go_trim(line[3:]), file=file, line=line_no, start=chunk_start)
                body = []
                state = "seeking"
        elif state == "seeking":
            if go_trim(line) == ENVELOPE_OPEN:
                state = "envelope"
        elif state == "envelope":
            if go_trim(line) == ENVELOPE_END:
                state = "body"
            else:
                _envelope_line(current, line)
        elif go_trim(line) == ENTRY_SEP:
            current.body = "\n".join(body).strip("\n")
            current.end = nxt
            entries.append(current)
            chunk_start = nxt
            state = "idle"
        else:
            body.append(line)
    return Parsed(entries=entries, rest=chunk_start, torn=state != "idle")
