"""The hash chain over the workspace (CONTRACT 2.5): canonical text, seals, and verification."""

from __future__ import annotations

import hashlib
import hmac
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import msgspec

from flux7.shared.memory.times import rfc3339
from flux7.shared.memory.workspace import LONG_TERM_FILE, Entry, list_daily_files, parse_entries

__all__ = [
    "CHAIN_VERSION",
    "ChainBreak",
    "ChainReport",
    "canonical",
    "chain_order",
    "go_quote",
    "seal",
    "verify_chain",
    "verify_daily_files",
    "verify_streams",
    "workspace_streams",
]

CHAIN_VERSION = "mem7-chain-v1"

_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
_PRINTABLE_CATEGORIES = ("L", "M", "N", "P", "S")


def _go_printable(ch: str) -> bool:
    """Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space."""
    return ch == " " or unicodedata.category(ch)[0] in _PRINTABLE_CATEGORIES


def go_quote(text: str) -> str:
    """Go's strconv.Quote. Printable non-ASCII stays raw; surrogate escapes are the file's invalid bytes."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif _go_printable(ch):
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def canonical(e: Entry, prev: str) -> str:
    """What a seal covers: the parsed fields in a fixed order, after the previous seal.

    The bitemporal fields come last and only when present, so entries without them seal exactly as the
    reference's v1 chain does.
    """

    def ts(moment: int | None) -> str:
        return "" if moment is None else rfc3339(moment)

    fields = [
        ("v", CHAIN_VERSION),
        ("prev", prev),
        ("op", e.op),
        ("entity", e.entity),
        ("predicate", e.predicate),
        ("agent", e.agent),
        ("trace", e.trace),
        ("tags", ",".join(e.tags)),
        ("ttl", str(e.ttl)),
        ("created", ts(e.created)),
        ("updated", ts(e.updated)),
        ("deleted", ts(e.deleted)),
        ("body", e.body),
    ]
    if e.valid_from is not None:
        fields.append(("valid_from", ts(e.valid_from)))
    if e.valid_to is not None:
        fields.append(("valid_to", ts(e.valid_to)))
    return "".join(f"{name}={go_quote(value)}\n" for name, value in fields)


def seal(key: bytes, e: Entry, prev: str) -> str:
    text = canonical(e, prev).encode("utf-8", "surrogateescape")
    if key:
        return hmac.new(key, text, hashlib.sha256).hexdigest()
    return hashlib.sha256(text).hexdigest()


class ChainBreak(msgspec.Struct):
    file: str
    line: int
    entity: str
    reason: str


class ChainReport(msgspec.Struct):
    entries: int = 0
    legacy: int = 0
    sealed: int = 0
    keyed: bool = False
    # `break` is a Python keyword: the wire name is set by `rename`.
    brk: ChainBreak | None = msgspec.field(default=None, name="break")

    @property
    def holds(self) -> bool:
        return self.brk is None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = msgspec.to_builtins(self)
        return out


def chain_order(streams: Sequence[Iterable[Entry]], head: str = "") -> Iterator[Entry]:
    """Interleave append-only streams of entries (the daily files in order; MEMORY.md) into seal order.

    The chain is one sequence across both: each stream is in order, so the next entry is the stream head
    whose `prev` is the current seal. Before the chain starts, unsealed (legacy) entries come first, then
    the sealed one without a `prev`. Where no head links (a break, or streams with gaps), the earliest by
    time goes next, the daily files first on a tie. With a single stream this is simply the file order.
    Streams are read lazily, one entry ahead, so a whole workspace need not sit in memory.
    """
    its = [iter(s) for s in streams]
    heads: dict[int, Entry] = {}
    for i, it in enumerate(its):
        first = next(it, None)
        if first is not None:
            heads[i] = first
    started = bool(head)
    while heads:
        live = sorted(heads)
        pick: int | None = None
        if started:
            pick = next((i for i in live if heads[i].hash and heads[i].prev == head), None)
        else:
            pick = next((i for i in live if not heads[i].hash), None)
            if pick is None:
                pick = next((i for i in live if not heads[i].prev), None)
        if pick is None:
            pick = min(live, key=lambda i: (heads[i].when, i))
        e = heads.pop(pick)
        if e.hash:
            head, started = e.hash, True
        yield e
        following = next(its[pick], None)  # read on only once the caller is done with `e`
        if following is not None:
            heads[pick] = following


def _file_entries(workspace: Path, names: Iterable[str]) -> Iterator[Entry]:
    for name in names:
        yield from parse_entries((workspace / name).read_bytes(), name).entries


def workspace_streams(workspace: Path) -> list[Iterator[Entry]]:
    """[the daily files' entries in file order, MEMORY.md's entries]: what chain_order interleaves."""
    long_term = [LONG_TERM_FILE] if (workspace / LONG_TERM_FILE).is_file() else []
    return [_file_entries(workspace, list_daily_files(workspace)), _file_entries(workspace, long_term)]


def verify_chain(workspace: Path, key: bytes, head: str = "") -> ChainReport:
    """The workspace's files (daily files and MEMORY.md) in seal order (see verify_streams)."""
    return verify_streams(workspace_streams(workspace), key, head, label=lambda name: str(workspace / name))


def verify_daily_files(files: Iterable[tuple[str, str, bytes]], key: bytes, head: str = "") -> ChainReport:
    """(name, label, bytes) workspace files, the daily ones in order (a database's journal): MEMORY.md's entries
    are their own stream, woven in by seal order as on disk."""
    labels: dict[str, str] = {}
    daily: list[Entry] = []
    long_term: list[Entry] = []
    for name, label, data in files:
        labels[name] = label
        (long_term if name == LONG_TERM_FILE else daily).extend(parse_entries(data, name).entries)
    return verify_streams([daily, long_term], key, head, label=lambda name: labels.get(name, name))


def verify_streams(
    streams: Sequence[Iterable[Entry]], key: bytes, head: str = "", *, label: Callable[[str], str] = str
) -> ChainReport:
    """Walk every entry in seal order; stop at the first place the chain does not vouch for. `head` is the last
    seal the database recorded: a chain that never reaches it lost its end (a truncated or deleted file),
    which the seals alone cannot show."""
    report = ChainReport(keyed=bool(key))
    last, started, where = "", False, ""
    seen: set[str] = set()
    for e in chain_order(streams):
        report.entries += 1
        where = label(e.file)
        reason = ""
        if not e.hash:
            if not started:
                report.legacy += 1
                continue
            reason = "entry without a seal after the chain started"
        elif started and e.prev != last:
            reason = "does not follow the previous seal: an entry was removed, added or reordered before it"
        elif not started and e.prev:
            reason = "the first sealed entry points to a predecessor that is missing"
        elif not hmac.compare_digest(seal(key, e, e.prev), e.hash):
            reason = "content changed since it was sealed"
            if not key:
                reason += " (or it was sealed with a key: set MEM7_CHAIN_KEY)"
        if reason:
            report.brk = ChainBreak(file=where, line=e.line, entity=e.entity, reason=reason)
            return report
        started, last = True, e.hash
        seen.add(e.hash)
        report.sealed += 1
    if head and head not in seen:
        report.brk = ChainBreak(
            file=where,
            line=0,
            entity="",
            reason=f"the chain ends at seal {last[:12] or '(none)'} but the database's head is {head[:12]}: "
            "entries were removed from the end or a workspace file is missing",
        )
    return report
