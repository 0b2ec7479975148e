"""FTS5 query shaping (CONTRACT 2.3): raw-mode sanitising, natural mode, sequential-key neighbours."""

from __future__ import annotations

import re

__all__ = ["naturalize", "neighbour_keys", "parse_sequential_key", "sanitize"]

_OPERATORS = {"AND", "OR", "NOT", "NEAR"}
_BARE = re.compile(r"[0-9A-Za-z_]+\*?")
_TOKEN = re.compile(r"[a-zA-Z0-9]+")
_SEQUENTIAL = re.compile(r"^(.*\.[a-zA-Z]+)(\d+)$")
_BREAKS = ' \t\n()"'

# Words that almost never carry retrieval signal; domain words, names and verbs with content are kept.
_STOP = """a an the is are was were be been being do does did doing done have has had having what when
where who whom whose why how which this that these those i you he she we they it me him her us them my your
his our their its to from of in on at by for with about as into through and or but not no nor so yet if then
than because will would could should may might can get got go went gone come came make made take took say
said says"""
STOP_WORDS = frozenset(_STOP.split())


def _quote_token(token: str) -> str:
    if token in _OPERATORS or _BARE.fullmatch(token):
        return token
    return '"' + token.replace('"', '""') + '"'


def sanitize(query: str) -> str:
    """Keep identifiers, operators, parentheses and quoted phrases; quote every other token."""
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch in " \t\n()":
            out.append(ch)
            i += 1
        elif ch == '"':
            j = query.find('"', i + 1)
            j = n if j < 0 else j + 1
            out.append(query[i:j])
            i = j
        else:
            j = i
            while j < n and query[j] not in _BREAKS:
                j += 1
            out.append(_quote_token(query[i:j]))
            i = j
    return "".join(out)


def naturalize(query: str) -> str:
    """A plain-language question as an OR of its meaningful words, prefix-matched from 4 letters."""
    seen: set[str] = set()
    words: list[str] = []
    for token in _TOKEN.findall(query.lower()):
        if token in STOP_WORDS or len(token) < 3 or token in seen:
            continue
        seen.add(token)
        words.append(token + "*" if len(token) >= 4 else token)
        if len(words) >= 12:
            break
    return " OR ".join(words) if words else query


def parse_sequential_key(key: str) -> tuple[str, int, int] | None:
    """`conv-26.session_1.t005` -> (`conv-26.session_1.t`, 5, 3): prefix, position, digit width."""
    m = _SEQUENTIAL.match(key)
    if not m:
        return None
    return m.group(1), int(m.group(2)), len(m.group(2))


def neighbour_keys(keys: list[str], radius: int) -> list[str]:
    """Keys at +-radius of each sequential key, with the same zero-padding, not already in `keys`."""
    have = set(keys)
    out: list[str] = []
    for key in keys:
        parsed = parse_sequential_key(key)
        if parsed is None:
            continue
        prefix, idx, width = parsed
        for off in range(-radius, radius + 1):
            if off == 0 or idx + off < 0:
                continue
            candidate = f"{prefix}{idx + off:0{width}d}"
            if candidate not in have:
                have.add(candidate)
                out.append(candidate)
    return out
