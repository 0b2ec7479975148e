"""Guess a tool's family (named | generic) and access (read | write | unknown) from what its upstream
declares.

Conflicting signals resolve to the stricter reading: one write signal outweighs any number of read signals,
because a false "read" opens a hole while a false "write" only costs an approval.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from flux7.shared.upstreams.base import Classification, Param

__all__ = ["classify"]

# Matched on whole tokens of the upstream's own name, so "thread" does not read as "read".
# fmt: off
_READ_VERBS = frozenset([
    "get", "list", "find", "search", "read", "describe", "show", "fetch", "query", "view", "lookup",
    "inspect", "info", "tree", "status", "whoami", "count", "stat", "logs", "recall", "diff", "log",
    "version", "help", "cat", "ls", "head", "tail",
])
_WRITE_VERBS = frozenset([
    "create", "update", "delete", "remove", "send", "write", "edit", "move", "set", "put", "post", "patch",
    "execute", "exec", "run", "deploy", "drop", "insert", "upload", "modify", "rename", "archive", "trash",
    "apply", "destroy", "kill", "stop", "start", "restart", "push", "publish", "forget", "store", "save",
    "mark", "recover", "cast", "approve", "deny", "revoke", "purge", "prune", "draft", "rm", "mv", "cp",
    "install", "commit", "merge",
])
# fmt: on
# Argument names that carry a language rather than a value ("query" alone usually runs a search).
_LANGUAGE_PARAMS = frozenset(["code", "script", "sql", "command", "cmd", "statement", "program", "expression"])
_RUN_VERBS = frozenset(["execute", "exec", "run", "sql"])
_SPLIT = re.compile(r"[_\-./ ]+")


def _tokens(name: str) -> list[str]:
    return [t for t in _SPLIT.split(name.lower()) if t]


def classify(
    *,
    own_name: str,
    params: Iterable[Param] = (),
    method: str = "",
    annotations: Mapping[str, Any] | None = None,
    dispatcher: bool = False,
) -> Classification:
    """`own_name` is the upstream's own name for the tool, without the mesh's namespace (`listPets`)."""
    reasons: list[str] = []
    family = "named"
    tokens = _tokens(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", own_name))

    if dispatcher:
        family = "generic"
        reasons.append("CLI dispatcher: the subcommand is an argument")
    for p in params:
        if p.type not in ("", "string"):
            continue
        lowered = p.name.lower()
        if lowered in _LANGUAGE_PARAMS:
            family = "generic"
            reasons.append(f'argument "{p.name}" carries a language')
        elif lowered == "query" and _RUN_VERBS.intersection(tokens):
            family = "generic"
            reasons.append(f'argument "{p.name}" is run, not searched')

    read = write = False
    verb = method.upper()
    if verb in ("GET", "HEAD", "OPTIONS"):
        read = True
        reasons.append(f"HTTP {verb}")
    elif verb:
        write = True
        reasons.append(f"HTTP {verb}")
    if annotations:
        hint = annotations.get("readOnlyHint")
        if hint is True:
            read = True
            reasons.append("annotation readOnlyHint=true")
        elif hint is False:
            write = True
            reasons.append("annotation readOnlyHint=false")
        if annotations.get("destructiveHint") is True:
            write = True
            reasons.append("annotation destructiveHint=true")
        if annotations.get("openWorldHint") is True:
            reasons.append("annotation openWorldHint=true: reaches outside systems")
    for tok in tokens:
        if tok in _WRITE_VERBS:
            write = True
            reasons.append(f'name verb "{tok}"')
        elif tok in _READ_VERBS:
            read = True
            reasons.append(f'name verb "{tok}"')

    if write:
        access = "write"
    elif read:
        access = "read"
    else:
        access = "unknown"
        reasons.append("no signal")
    return Classification(family=family, access=access, reasons=reasons)
