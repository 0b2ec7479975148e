"""The hash chain over trace lines (CONTRACT 1.11, the reference's docs/trace-integrity.md).

A line is the entry JSON without its closing brace, then `,"seq":N,"alg":…,"prev_hash":…,"hash":…}`,
where hash = SHA-256 or HMAC-SHA256(key) of "<seq>\\n<alg>\\n<prev_hash>\\n" + the entry bytes as written.
The entry bytes are hashed exactly as they sit on disk, never re-encoded; seq and alg are inside the hash, so
lines cannot be renumbered and a chain cannot be downgraded from HMAC without the key.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.store.private_files import PRIVATE_FILE, private_dir

__all__ = [
    "ALG_HMAC",
    "ALG_SHA256",
    "Envelope",
    "JsonlAppender",
    "Verifier",
    "chain_hash",
    "iter_file_lines",
    "last_envelope",
    "seal",
    "split_line",
    "verify_files",
]

log = logging.getLogger("flux7.tracing")

ALG_SHA256 = "sha256"
ALG_HMAC = "hmac-sha256"

# Inside the entry JSON a string cannot hold an unescaped quote, so the LAST occurrence of this marker is
# always the envelope, even when params carry a "seq" key.
_MARKER = b',"seq":'


class Envelope(msgspec.Struct):
    seq: int = 0
    alg: str = ""
    prev_hash: str = ""
    hash: str = ""


_envelope_decoder = msgspec.json.Decoder(Envelope)


class _CallKey(msgspec.Struct):
    """What the walk needs of an entry to follow a call across revisions: the span id is new for every call,
    so two calls sharing a caller's trace id stay apart."""

    trace_id: str = ""
    span_id: str = ""
    status_code: int = -1
    tool: str = ""
    agent_id: str = ""
    timestamp: str = ""


_call_decoder = msgspec.json.Decoder(_CallKey)


def chain_hash(key: bytes | None, alg: str, seq: int, prev_hash: str, payload: bytes) -> str:
    head = f"{seq}\n{alg}\n{prev_hash}\n".encode()
    if alg == ALG_HMAC:
        mac = hmac.new(key or b"", head, hashlib.sha256)
        mac.update(payload)
        return mac.hexdigest()
    digest = hashlib.sha256(head)
    digest.update(payload)
    return digest.hexdigest()


def seal(payload: bytes, key: bytes | None, seq: int, prev_hash: str) -> tuple[bytes, str]:
    """The chained line for an entry's JSON (no newline) and its hash."""
    alg = ALG_HMAC if key else ALG_SHA256
    digest = chain_hash(key, alg, seq, prev_hash, payload)
    tail = f',"seq":{seq},"alg":"{alg}","prev_hash":"{prev_hash}","hash":"{digest}"}}'.encode()
    return payload[:-1] + tail, digest


def split_line(line: bytes) -> tuple[bytes, Envelope] | None:
    """(entry JSON, envelope) of a chained line; None for a line written before the chain existed."""
    i = line.rfind(_MARKER)
    if i < 0:
        return None
    try:
        env = _envelope_decoder.decode(b"{" + line[i + 1 :])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not env.hash or env.seq < 0:
        return None
    return line[:i] + b"}", env


class Verifier:
    """Walks lines oldest first and stops at the first break. With a key every chained line must be HMAC;
    without one an HMAC line cannot be checked and is a break."""

    def __init__(self, key: bytes | None) -> None:
        self.key = key or None
        self.lines = 0
        self.unchained = 0
        self.chained = 0
        self.first_seq = 0
        self.last_seq = 0
        self.anchor = ""
        self.head = ""
        self.alg = ""
        self.brk: dict[str, Any] | None = None
        self._started = False
        # Calls whose newest line is still an intent (status_code 0): outcome unknown.
        self.pending: dict[tuple[str, str], dict[str, Any]] = {}

    def feed(self, file: str, lineno: int, line: bytes) -> bool:
        """Check one line; False once the chain is broken (the break is recorded)."""
        if self.brk is not None:
            return False
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            return True
        self.lines += 1
        parts = split_line(line)
        if parts is None:
            if self._started:
                return self._fail(file, lineno, 0, "unchained line inside the chain")
            self.unchained += 1
            return True
        payload, env = parts
        if self.key is not None and env.alg != ALG_HMAC:
            return self._fail(file, lineno, env.seq, f"alg {env.alg} where hmac-sha256 is required")
        if self.key is None and env.alg == ALG_HMAC:
            return self._fail(file, lineno, env.seq, "hmac-sha256 line and no key to check it (set MESH_TRACE_KEY)")
        if env.alg not in (ALG_HMAC, ALG_SHA256):
            return self._fail(file, lineno, env.seq, f"unknown alg {env.alg}")
        if self._started:
            if env.seq != self.last_seq + 1:
                return self._fail(file, lineno, env.seq, f"seq {env.seq} follows {self.last_seq}")
            if env.prev_hash != self.head:
                return self._fail(file, lineno, env.seq, "prev_hash does not match the previous line")
        want = chain_hash(self.key, env.alg, env.seq, env.prev_hash, payload)
        if not hmac.compare_digest(want, env.hash):
            return self._fail(file, lineno, env.seq, "hash does not match the content")
        if not self._started:
            self._started = True
            self.first_seq = env.seq
            self.anchor = env.prev_hash
        self.chained += 1
        self.last_seq = env.seq
        self.head = env.hash
        self.alg = env.alg
        self._follow(file, lineno, env.seq, payload)
        return True

    def _follow(self, file: str, lineno: int, seq: int, payload: bytes) -> None:
        try:
            call = _call_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # not an entry this walk can follow; the hash above already vouched for the bytes
        key = (call.trace_id, call.span_id)
        if call.status_code == 0:
            self.pending[key] = {
                "trace_id": call.trace_id,
                "seq": seq,
                "agent_id": call.agent_id,
                "tool": call.tool,
                "timestamp": call.timestamp,
                "file": file,
                "line": lineno,
            }
        else:
            self.pending.pop(key, None)

    def fail_at_end(self, file: str, lineno: int, reason: str) -> None:
        if self.brk is None:
            self._fail(file, lineno, 0, reason)

    def _fail(self, file: str, lineno: int, seq: int, reason: str) -> bool:
        self.brk = {"file": file, "line": lineno, "reason": reason}
        if seq:
            self.brk = {"file": file, "line": lineno, "seq": seq, "reason": reason}
        return False

    def report(self) -> dict[str, Any]:
        """The reference's Report: zero-valued optional keys are omitted."""
        out: dict[str, Any] = {"lines": self.lines, "unchained": self.unchained, "chained": self.chained}
        optional = {
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "anchor": self.anchor,
            "head": self.head,
            "alg": self.alg,
            "break": self.brk,
        }
        out.update({k: v for k, v in optional.items() if v})
        return out


def iter_file_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline) for every line of a file. Raises OSError."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            yield n, raw.rstrip(b"\n")


def verify_files(paths: Iterable[str | Path], key: bytes | None) -> Verifier:
    """Verify files in order (oldest first: traces.jsonl.old, then traces.jsonl). Raises OSError."""
    v = Verifier(key)
    for p in paths:
        for n, line in iter_file_lines(p):
            if not v.feed(str(p), n, line):
                return v
    return v


def last_envelope(path: str | Path, chunk: int = 64 * 1024) -> Envelope | None:
    """The envelope of the last chained line of a file, reading backwards from its end."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, read in reverse chunks
    except FileNotFoundError:
        return None
    with f:
        end = f.seek(0, os.SEEK_END)
        pos, tail = end, b""
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
            lines = tail.split(b"\n")
            # The first piece may be a partial line unless we reached the start of the file.
            complete = lines if pos == 0 else lines[1:]
            for line in reversed(complete):
                parts = split_line(line.rstrip(b"\r"))
                if parts is not None:
                    return parts[1]
            tail = lines[0] if pos > 0 else b""
    return None


class JsonlAppender:
    """Appends lines to the trace file, rotating it to `<file>.old` past max_bytes.

    Callers hold the database's write transaction while appending, which serialises every writer of this
    deployment (all worker processes). The file stays open between writes (O_APPEND); before each write a stat of
    the path says whether it is still the file open here, so a rotation done by another process (or a file moved
    or deleted by hand) is followed by the next line: two system calls per write instead of four.
    """

    def __init__(self, path: str | Path, max_bytes: int = 10 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.old_path = Path(f"{self.path}.old")
        self.max_bytes = max_bytes
        private_dir(self.path.parent)
        self._fd = -1
        self._ident = (0, 0)  # (st_dev, st_ino) of the file open as _fd
        self._closer: weakref.finalize[Any, Any] | None = None  # closes _fd when the appender is dropped

    def append(self, line: bytes) -> None:
        """Write one line; on a failure the file is cut back to where it was, so no partial line stays."""
        self.append_many([line])

    def append_many(self, lines: list[bytes]) -> None:
        """Write lines in one write (a batch of calls); on a failure the file is cut back to where it was."""
        data = b"\n".join(lines) + b"\n"
        fd, before = self._current()
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.EIO, f"short write to {self.path} ({written} of {len(data)} bytes)")
        except OSError:
            os.ftruncate(fd, before)
            raise
        size = before + len(data)
        if self.max_bytes > 0 and size >= self.max_bytes:
            self.rotate()

    def _current(self) -> tuple[int, int]:
        """The descriptor of the file now at `path` (opened again when the path names another file) and its size."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is None or self._fd < 0 or (st.st_dev, st.st_ino) != self._ident:
            self.close()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            st = os.fstat(fd)
            self._fd, self._ident = fd, (st.st_dev, st.st_ino)
            self._closer = weakref.finalize(self, os.close, fd)
        return self._fd, st.st_size

    def close(self) -> None:
        """Close the file (the next write opens it again)."""
        if self._closer is not None:
            self._closer()  # closes the descriptor once, and never again at collection
            self._closer = None
        self._fd = -1

    def rotate(self) -> None:
        self.close()
        os.replace(self.path, self.old_path)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))  # the new file exists at once, as in Go
        log.info("trace file rotated to %s", self.old_path)

    def files(self) -> list[Path]:
        """The files holding the chain, oldest first."""
        return [p for p in (self.old_path, self.path) if p.exists()]
