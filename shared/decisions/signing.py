"""Decision facts signed by the mesh: a keyed MAC that no agent can produce (docs/supervisor.md).

Memory is writable by anyone who reaches it, so a decision fact proves nothing by its tags. The mesh signs each
fact it writes with HMAC-SHA256 over a canonical encoding of the decision - approval id, tool, agent, outcome,
resolver kind, time - under a server secret: `decisions.signing_key`, or else `decisions.key` in the data
directory, created 0600 on first start. A precedent read from a separate memory counts only with a valid MAC.

A fact that names the call it decided (a `trace:` tag) is signed under domain 2, which covers that trace id too;
a fact without one under domain 1 (the facts written before trace ids were). The domains never verify each other,
so a trace tag can be neither added to, changed on, nor removed from a signed fact."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.errors import ConfigError
from flux7.shared.store.private_files import private_dir

__all__ = ["KEY_FILE", "DecisionSigner", "load_or_create_key", "signer_for"]

log = logging.getLogger("flux7.decisions")

KEY_FILE = "decisions.key"
_DOMAIN = "flux7-decision/1"  # a new canonical encoding gets a new domain, so old MACs never verify under it
_DOMAIN_TRACED = "flux7-decision/2"  # /1's fields plus the trace id of the decided call


class DecisionSigner:
    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("a decision signing key has at least 32 bytes")
        self._key = key

    @staticmethod
    def canonical(
        *, approval_id: str, tool: str, agent: str, status: str, kind: str, at_ms: int, trace_id: str = ""
    ) -> bytes:
        """A JSON array: unambiguous whatever characters a tool or agent name holds."""
        fields: list[object] = [approval_id, tool, agent, status, kind, int(at_ms)]
        if trace_id:
            return msgspec.json.encode([_DOMAIN_TRACED, *fields, trace_id])
        return msgspec.json.encode([_DOMAIN, *fields])

    def mac(
        self, *, approval_id: str, tool: str, agent: str, status: str, kind: str, at_ms: int, trace_id: str = ""
    ) -> str:
        message = self.canonical(
            approval_id=approval_id, tool=tool, agent=agent, status=status, kind=kind, at_ms=at_ms, trace_id=trace_id
        )
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def verify(
        self,
        mac: str,
        *,
        approval_id: str,
        tool: str,
        agent: str,
        status: str,
        kind: str,
        at_ms: int,
        trace_id: str = "",
    ) -> bool:
        expected = self.mac(
            approval_id=approval_id, tool=tool, agent=agent, status=status, kind=kind, at_ms=at_ms, trace_id=trace_id
        )
        return hmac.compare_digest(expected.encode(), mac.strip().lower().encode())


def load_or_create_key(path: Path) -> bytes:
    """The key in `path`; on first start a new random one, written 0600 and published whole (link, not rename,
    so two workers starting together agree on one key and neither reads a half-written file)."""
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another worker won: use its key
            os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    text = path.read_text().strip()
    if len(text) < 32:
        raise ConfigError(str(path), "(file)", "a decision signing key file holds at least 32 characters")
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s is readable by others (mode %o): whoever reads it can sign precedents", path, mode & 0o777)
    return text.encode()


def signer_for(settings: Any, db_path: str) -> DecisionSigner:
    """The configured key, else the data directory's key file; an in-memory database gets a key of its own."""
    configured = settings.decisions.signing_key
    if configured:
        return DecisionSigner(configured.encode())
    if db_path == ":memory:":
        return DecisionSigner(secrets.token_bytes(32))
    return DecisionSigner(load_or_create_key(Path(db_path).resolve().parent / KEY_FILE))
