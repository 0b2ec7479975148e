"""Agent scopes (CONTRACT 2.6): who an identified agent may read, and who may forget or read raw files."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import msgspec

from flux7.shared.errors import ConfigError

__all__ = ["Scopes", "go_path_match"]


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str] | None:
    """Go's path.Match as a regex: `*` and `?` stop at `/`; None for a malformed pattern (matches nothing)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\":
            i += 1
            if i >= n:
                return None
            out.append(re.escape(pattern[i]))
        elif ch == "[":
            i += 1
            negate = i < n and pattern[i] == "^"
            if negate:
                i += 1
            parts: list[str] = []
            while True:
                if i >= n:
                    return None
                if pattern[i] == "]" and parts:
                    break
                lo, i = _class_char(pattern, i)
                if lo is None:
                    return None
                if i < n and pattern[i] == "-":
                    hi, i = _class_char(pattern, i + 1)
                    if hi is None or hi < lo:
                        return None
                    parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
                else:
                    parts.append(re.escape(lo))
            out.append(("[^" if negate else "[") + "".join(parts) + "]")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _class_char(pattern: str, i: int) -> tuple[str | None, int]:
    if i >= len(pattern) or pattern[i] in "-]":
        return None, i
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            return None, i
    return pattern[i], i + 1


def go_path_match(pattern: str, name: str) -> bool:
    compiled = _compile(pattern)
    return compiled is not None and compiled.fullmatch(name) is not None


class Scopes(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`{"read": {"<agent>": ["<owner glob>", ...]}, "admin": ["<agent>", ...]}`."""

    read: dict[str, tuple[str, ...]] = {}
    admin: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> Scopes:
        file = str(Path(path).resolve())
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(file, "(file)", e.strerror or str(e)) from None
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as e:
            text, _, at = str(e).rpartition(" - at `")
            return _raise(file, at.rstrip("`").replace("$.", "", 1) if at else "(top level)", text or str(e))
        except msgspec.DecodeError as e:
            return _raise(file, "(json)", str(e))

    def is_admin(self, agent: str) -> bool:
        return agent in self.admin

    def may_read(self, reader: str, owner: str) -> bool:
        if reader == owner or self.is_admin(reader):
            return True
        return any(go_path_match(p, owner) for p in self.read.get(reader, ()))

    def readable(self, reader: str, owners: list[str]) -> frozenset[str]:
        return frozenset(o for o in [*owners, reader] if self.may_read(reader, o))


def _raise(file: str, key: str, fault: str) -> Scopes:
    raise ConfigError(file, key, fault)
