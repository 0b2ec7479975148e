"""Shell commands read the way bash reads them (parsed with `bashlex`), for the local safety layer.

Two questions are answered on the parsed command, never on its text:

- `destroys`: does it delete (or chmod/chown recursively) `/`, a top-level system folder, the home directory or
  a folder above it, once `~`, `$HOME`, `${HOME}`, other variables (from the environment the command runs with;
  an unset one is empty, as bash makes it), braces and globs are expanded? `rm -rf "$HOME"`, `rm -rf ~/*`,
  `find ~ -delete` and the same inside `sh -c '...'`, `sudo`, loops and substitutions are.
- `reads_only`: is it made only of commands that read (`ls cat head tail wc stat file tree pwd echo which whoami
  date`, `git status|diff|log|show|branch|blame|rev-parse|ls-files`), chained by `|`, `&&`, `||` or `;`, with no
  redirection, variable, substitution or assignment, no option that writes or deletes (`--output`, `-o`, `-D`,
  `--delete`, ...), and every path argument inside the working folder and not hidden? Such a command runs
  without asking (in the sandbox all the same).

A command bashlex cannot parse is neither: it is not a read, and only the regular-expression patterns of
shared/agent/safety.py judge whether it is dangerous (the sandbox contains it either way)."""

from __future__ import annotations

import glob
import os
import pwd
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["destroys", "inside", "reads_only", "simple_commands", "under"]

# Commands that only read, and the options that make them write, delete or change something.
_READERS: dict[str, frozenset[str]] = {
    "ls": frozenset(),
    "cat": frozenset(),
    "pwd": frozenset(),
    "echo": frozenset(),
    "head": frozenset(),
    "tail": frozenset(),
    "wc": frozenset(),
    "which": frozenset(),
    "whoami": frozenset(),
    "stat": frozenset(),
    "date": frozenset({"-s", "--set"}),
    "file": frozenset({"-C", "--compile"}),
    "tree": frozenset({"-o", "-R"}),  # -o writes its output to a file; -R writes 00Tree.html files
}
_NO_PATHS = {"echo", "pwd", "whoami", "which"}  # their arguments are not files
_GIT_READERS = {"status", "diff", "log", "show", "branch", "blame", "rev-parse", "ls-files"}
_GIT_REFUSED = frozenset({"--output", "--ext-diff", "--no-index", "-O"})
_BRANCH_REFUSED = frozenset(
    {
        *("-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-f", "--force", "-u", "-t"),
        *("--set-upstream-to", "--unset-upstream", "--edit-description", "--track", "--no-track"),
        "--create-reflog",
    }
)

_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"}
# Commands that run the command after them: `sudo rm -rf /` is `rm -rf /`.
_WRAPPERS = {"sudo", "doas", "env", "nice", "nohup", "time", "command", "exec", "builtin", "timeout", "ionice"}
_WRAPPER_VALUES = {"-u", "-g", "-C", "-n", "-c", "-p", "-s", "-k", "-U", "-D"}  # their options that take a value
_MAX_DEPTH = 4  # `sh -c "sh -c '...'"` is read this deep

_PARAM = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
_BRACES = re.compile(r"\{([^{}]*)\}")
_GLOB = re.compile(r"[*?\[]")


class _Unknown(Exception):
    """A word whose value cannot be known before it runs (a substitution, an unusual expansion)."""


def _parse(command: str) -> list[Any] | None:
    import bashlex  # 80 ms to import (its parser tables): only once a command is judged, not for `--help`

    try:
        return list(bashlex.parse(command))
    except Exception:  # ParsingError, NotImplementedError (case, arithmetic) and its own bugs on odd input alike:
        return None  # unparsed is "not a read", and only the patterns judge whether it is dangerous


def _children(node: Any) -> Iterator[Any]:
    for name in ("parts", "list"):
        yield from getattr(node, name, None) or []
    for name in ("command", "output"):
        child = getattr(node, name, None)
        if child is not None and hasattr(child, "kind"):
            yield child


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def _assigned(trees: Sequence[Any]) -> set[str]:
    """Names the command itself sets (assignments, `for` variables): their values are not the environment's."""
    names: set[str] = set()
    for tree in trees:
        for node in _walk(tree):
            if node.kind == "assignment":
                names.add(node.word.split("=", 1)[0].rstrip("+"))
            elif node.kind == "for":
                words = [p for p in node.parts if p.kind == "word"]
                if words:
                    names.add(words[0].word)
    return names


class _Expander:
    """Expands a word as bash would, from the environment the command runs with."""

    def __init__(self, env: Mapping[str, str], home: Path, cwd: Path, assigned: set[str]) -> None:
        self.env, self.home, self.cwd, self.assigned = env, home, cwd, assigned

    def _param(self, match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner is None:
            name, op, alt = match.group(2), "", ""
        else:
            found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=?+])(.*))?", inner, re.S)
            if found is None:
                raise _Unknown(inner)  # ${#x}, ${x%y}, ${x/a/b}, ...
            name, op, alt = found.group(1), found.group(2) or "", found.group(3) or ""
        if name in self.assigned or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise _Unknown(name)
        value = self.env.get(name)
        if op in ("-", "=", "?"):
            return value if value is not None else alt
        if op in (":-", ":=", ":?"):
            return value or alt
        if op in ("+", ":+"):
            return alt if (value if op == ":+" else value is not None) else ""
        return value or ""

    def _tilde(self, text: str) -> str:
        if not text.startswith("~"):
            return text
        user, sep, rest = text[1:].partition("/")
        if user:
            try:
                base = pwd.getpwnam(user).pw_dir
            except KeyError:
                return text
        else:
            base = str(self.home)
        return base + (sep + rest if sep else "")

    def words(self, node: Any) -> list[str]:
        """The words `node` becomes; _Unknown when that depends on running something."""
        kinds = {p.kind for p in getattr(node, "parts", None) or []}
        if kinds & {"commandsubstitution", "processsubstitution"}:
            raise _Unknown(node.word)
        out: list[str] = []
        for text in _braces(node.word):
            if "tilde" in kinds or text.startswith("~"):
                text = self._tilde(text)
            if "parameter" in kinds:
                text = _PARAM.sub(self._param, text)
            out.extend(self._glob(text))
        return out

    def _glob(self, text: str) -> list[str]:
        if not _GLOB.search(text):
            return [text]
        pattern = text if text.startswith("/") else str(self.cwd / text)
        return sorted(glob.glob(pattern)) or [text]


def _braces(word: str, depth: int = 0) -> list[str]:
    """`a{b,c}d` as `abd acd` (comma lists only; `{1..3}` sequences stay as they are)."""
    match = _BRACES.search(word)
    if match is None or "," not in match.group(1) or depth > 8:
        return [word]
    head, tail = word[: match.start()], word[match.end() :]
    return [w for choice in match.group(1).split(",") for w in _braces(head + choice + tail, depth + 1)]


# --- destroys -----------------------------------------------------------------------------------------------------


def _doomed(path: str, cwd: Path, home: Path) -> str:
    """What `path` is when deleting it recursively wrecks the machine or the home directory ("" otherwise)."""
    if not path:
        return ""
    for candidate in {Path(os.path.normpath(cwd / path)), (cwd / path).resolve()}:
        if candidate == Path("/"):
            return "/"
        if candidate == home or candidate in home.parents:
            return "the home directory" if candidate == home else f"{candidate} (which holds the home directory)"
        if len(candidate.parts) == 2:
            return f"the system folder {candidate}"
    return ""


def _glob_base(text: str) -> str:
    """The folder a glob pattern lists (`~/*` lists the home directory)."""
    cut = _GLOB.search(text)
    return os.path.dirname(text[: cut.start()]) if cut else ""


def _targets(ex: _Expander, nodes: Sequence[Any]) -> Iterator[tuple[str, bool]]:
    """Each expanded argument, and whether it came from a glob."""
    for node in nodes:
        try:
            words = ex.words(node)
        except _Unknown:
            continue
        for text in _braces(node.word):  # a glob first: `rm -rf ~/*` is about the home directory, not one file
            if _GLOB.search(text):
                base = _glob_base(ex._tilde(text))
                try:
                    base = _PARAM.sub(ex._param, base)
                except _Unknown:
                    continue
                yield base or ".", True
        for word in words:
            yield word, False


def _command_words(node: Any) -> list[Any]:
    return [p for p in node.parts if p.kind == "word"]


def _unwrap(ex: _Expander, words: list[Any]) -> list[Any]:
    """The command a wrapper (`sudo`, `env`, `nice`, `timeout`, ...) runs."""
    while words:
        try:
            name = os.path.basename(ex.words(words[0])[0])
        except (_Unknown, IndexError):
            return words
        if name not in _WRAPPERS:
            return words
        rest = words[1:]
        while rest and (rest[0].word.startswith("-") or (name == "env" and "=" in rest[0].word)):
            takes_value = rest[0].word in _WRAPPER_VALUES and name != "env"
            rest = rest[2:] if takes_value else rest[1:]
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        words = rest
    return words


def _destroys_command(node: Any, ex: _Expander, depth: int) -> str:
    words = _unwrap(ex, _command_words(node))
    if not words:
        return ""
    try:
        name = os.path.basename(ex.words(words[0])[0])
    except (_Unknown, IndexError):
        return ""
    args = words[1:]
    if name in _SHELLS or name == "eval":
        text = " ".join(a.word for a in args) if name == "eval" else ""
        for i, arg in enumerate(args):
            if name != "eval" and arg.word.startswith("-") and "c" in arg.word.lstrip("-") and i + 1 < len(args):
                text = args[i + 1].word
                break
        return _destroys(text, ex, depth + 1) if text else ""
    if name == "rm":
        flags = [a.word for a in args if a.word.startswith("-") and a.word != "-"]
        recursive = any(f in ("--recursive",) or (not f.startswith("--") and set(f[1:]) & {"r", "R"}) for f in flags)
        doomed = _first_doomed(ex, [a for a in args if not a.word.startswith("-")], "recursive delete of")
        unguarded = "--no-preserve-root" in flags
        if recursive and doomed:
            return doomed + (" (with --no-preserve-root)" if unguarded else "")
        return "rm --no-preserve-root" if unguarded else ""
    if name in ("chmod", "chown", "chgrp"):
        recursive = any(a.word in ("-R", "--recursive") or re.fullmatch(r"-[a-zA-Z]*R[a-zA-Z]*", a.word) for a in args)
        if not recursive:
            return ""
        return _first_doomed(ex, [a for a in args if not a.word.startswith("-")][1:], f"{name} -R of")
    if name == "find":
        texts = [a.word for a in args]
        deletes = "-delete" in texts or any(
            t in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(texts) and texts[i + 1] in ("rm", "shred")
            for i, t in enumerate(texts)
        )
        if not deletes:
            return ""
        starts: list[Any] = []
        for arg in args:
            if arg.word.startswith(("-", "(", "!")):
                if starts or arg.word not in ("-H", "-L", "-P"):
                    break
                continue
            starts.append(arg)
        why = _first_doomed(ex, starts, "find deleting")
        if not starts and _doomed(".", ex.cwd, ex.home):
            why = f"find deleting {_doomed('.', ex.cwd, ex.home)}"
        return why
    return ""


def _first_doomed(ex: _Expander, nodes: Sequence[Any], what: str) -> str:
    for target, from_glob in _targets(ex, nodes):
        why = _doomed(target, ex.cwd, ex.home)
        if why:
            return f"{what} {'everything in ' if from_glob else ''}{why}"
    return ""


def _destroys(command: str, ex: _Expander, depth: int) -> str:
    if depth > _MAX_DEPTH:
        return ""
    trees = _parse(command)
    if trees is None:
        return ""
    inner = _Expander(ex.env, ex.home, ex.cwd, ex.assigned | _assigned(trees))
    for tree in trees:
        for node in _walk(tree):  # in the order they run, near enough: `cd` moves the commands after it
            if node.kind == "command":
                why = _destroys_command(node, inner, depth)
                if why:
                    return why
                inner.cwd = _cd(node, inner) or inner.cwd
    return ""


def _cd(node: Any, ex: _Expander) -> Path | None:
    """Where a `cd` command goes (None for another command, or a place that cannot be known)."""
    words = _command_words(node)
    if not words or words[0].word != "cd":
        return None
    args = [w for w in words[1:] if not w.word.startswith("-")]
    if not args:
        return ex.home
    try:
        target = ex.words(args[0])
    except _Unknown:
        return None
    return (ex.cwd / target[0]).resolve() if target else None


def destroys(command: str, *, cwd: Path, home: Path, env: Mapping[str, str]) -> str:
    """Why `command` would destroy `/`, a system folder or the home directory once expanded ("" when it would
    not, or cannot be parsed)."""
    return _destroys(command, _Expander(env, home.resolve(), cwd.resolve(), set()), 0)


# --- reads_only ---------------------------------------------------------------------------------------------------


def under(path: Path, base: Path) -> bool:
    """`path.is_relative_to(base)` for resolved paths, as string prefixes: it runs for every file a walk opens."""
    text, root = str(path), str(base)
    return text == root or text.startswith(root if root.endswith("/") else root + "/")


def inside(path: Path, cwd: Path, hidden: Sequence[Path]) -> bool:
    """Whether `path` (absolute) resolves inside the working folder and outside every hidden path."""
    resolved = path.resolve()
    return under(resolved, cwd.resolve()) and not any(under(resolved, h) for h in hidden)


def _refused(option: str, refused: frozenset[str]) -> bool:
    if option.startswith("--"):
        name = option.split("=", 1)[0]
        # Long options may be abbreviated (a unique prefix): `--out=x` is `--output=x` to some parsers.
        return any(r.startswith("--") and (r == name or (len(name) >= 4 and r.startswith(name))) for r in refused)
    letters = set(option[1:])
    return any(not r.startswith("--") and r[1:] in letters for r in refused)


def _path_ok(word: str, cwd: Path, home: Path, hidden: Sequence[Path]) -> bool:
    if "{" in word and ("," in word or ".." in word):
        return False  # brace expansion could name anything
    text = str(home) + word[1:] if word == "~" or word.startswith("~/") else word
    if text.startswith("~"):
        return False
    target = cwd / text
    if _GLOB.search(text):
        matches = glob.glob(str(target))
        if not all(inside(Path(m), cwd, hidden) for m in matches):
            return False
    return inside(target, cwd, hidden)


def _reads(words: list[str], cwd: Path, home: Path, hidden: Sequence[Path]) -> bool:
    name, args = words[0], words[1:]
    if name == "git":
        if not args or args[0] not in _GIT_READERS:
            return False  # git's own options (-c, -C, --git-dir, ...) before the subcommand are not reads
        sub, args = args[0], args[1:]
        refused = _GIT_REFUSED | (_BRANCH_REFUSED if sub == "branch" else frozenset())
        creates = sub == "branch" and not {"-l", "--list"} & set(args)
        if creates and any(not a.startswith("-") for a in args):
            return False  # `git branch NAME` creates a branch
        checks_paths = True
    elif name in _READERS:
        refused, checks_paths = _READERS[name], name not in _NO_PATHS
    else:
        return False
    options = True
    for arg in args:
        if options and arg == "--":
            options = False
            continue
        if options and arg.startswith("-") and arg != "-":
            if _refused(arg, refused):
                return False
            value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else ""
            pathlike = checks_paths and value and ("/" in value or value.startswith((".", "~")))
            if pathlike and not _path_ok(value, cwd, home, hidden):
                return False
            continue
        if checks_paths and not _path_ok(arg, cwd, home, hidden):
            return False
    return True


def _only_reads(node: Any, cwd: Path, home: Path, hidden: Sequence[Path]) -> bool:
    kind = node.kind
    if kind == "list":
        return all(
            (p.kind == "operator" and p.op in ("&&", "||", ";", "\n"))
            or (p.kind != "operator" and _only_reads(p, cwd, home, hidden))
            for p in node.parts
        )
    if kind == "pipeline":
        return all(p.kind == "pipe" or _only_reads(p, cwd, home, hidden) for p in node.parts)
    if kind != "command":
        return False
    words: list[str] = []
    for part in node.parts:
        if part.kind != "word" or any(p.kind != "tilde" for p in getattr(part, "parts", None) or []):
            return False  # a redirection, an assignment, a variable or a substitution
        words.append(part.word)
    return bool(words) and _reads(words, cwd, home, hidden)


def reads_only(command: str, *, cwd: Path, home: Path, hidden: Sequence[Path] = ()) -> bool:
    """Whether `command` only reads, inside the working folder (see the module's docstring)."""
    trees = _parse(command)
    if not trees:
        return False
    root = cwd.resolve()
    return all(_only_reads(tree, root, home, hidden) for tree in trees)


def _simple(node: Any, out: list[str]) -> bool:
    kind = node.kind
    if kind == "list":
        return all(
            (p.kind == "operator" and p.op in ("&&", "||", ";", "\n")) or (p.kind != "operator" and _simple(p, out))
            for p in node.parts
        )
    if kind == "pipeline":
        return all(p.kind == "pipe" or _simple(p, out) for p in node.parts)
    if kind != "command":
        return False
    words: list[str] = []
    for part in node.parts:
        if part.kind != "word" or any(p.kind != "tilde" for p in getattr(part, "parts", None) or []):
            return False
        words.append(part.word)
    out.append(" ".join(words))
    return bool(words)


def simple_commands(command: str) -> list[str] | None:
    """The simple commands `command` chains with `|`, `&&`, `||` or `;`, each as its words joined by spaces; None
    when it is anything else (a redirection, an assignment, a variable, a substitution, a compound command, or
    what bashlex cannot parse), which no permission rule can allow."""
    trees = _parse(command)
    if not trees:
        return None
    out: list[str] = []
    return out if all(_simple(tree, out) for tree in trees) else None
