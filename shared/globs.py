"""The reference's glob semantics: Go filepath.Match (`*` and `?` do not cross `/`), `*` alone matches anything,
and an item also matches by plain equality (docs/config.md)."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["compile_glob", "glob_match", "is_exact"]


def is_exact(pattern: str) -> bool:
    return not any(c in pattern for c in "*?[\\")


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "^"
            if negate:
                j += 1
            body: list[str] = []
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\" and j + 1 < n:
                    j += 1
                body.append(re.escape(pattern[j]) if pattern[j] not in "-" else "-")
                j += 1
            if j >= n:  # Go reports ErrBadPattern; such a pattern never matches
                return r"(?!)"
            out.append("[" + ("^/" if negate else "") + "".join(body) + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    if pattern == "*":
        return re.compile(r"(?s:.*)\Z")
    return re.compile("(?s:" + _translate(pattern) + r")\Z")


def glob_match(pattern: str, value: str) -> bool:
    if pattern == value or pattern == "*":
        return True
    return compile_glob(pattern).match(value) is not None
