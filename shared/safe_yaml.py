"""YAML read with limits, for files a caller or an editor hands the server (policy files, the config file).

PyYAML builds documents recursively: a file nested 50,000 levels deep raises RecursionError from the pure-Python
loader and crashes the process (SIGSEGV) in libyaml's CSafeLoader. Anchors and aliases can also expand a small
file into a huge tree (the "billion laughs"). So the text is first walked as an event stream, which the parser
produces iteratively, and refused when it is too big, too deep or expands to too many nodes; only then is it
loaded.
Every fault is a ConfigError naming the file, so the start, a hot reload and an upload report it the same way.
"""

from __future__ import annotations

from typing import Any

import yaml

from flux7.shared.errors import ConfigError

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_POLICY_BYTES", "load_yaml", "yaml_fault"]

MAX_POLICY_BYTES = 1024 * 1024  # a policy file (and the config file): 1 MiB
MAX_DEPTH = 64  # nested mappings and lists; a policy needs about 6
MAX_NODES = 1_000_000  # after expanding aliases


def _text(data: str | bytes, source: str, max_bytes: int) -> str:
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > max_bytes:
        raise ConfigError(source, "(size)", f"{size} bytes; the limit is {max_bytes} bytes")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(source, "(encoding)", f"not valid UTF-8 (byte {e.start})") from None


def _check_shape(text: str, source: str, max_depth: int, max_nodes: int) -> None:
    depth = 0
    nodes = 0
    anchors: dict[str, int] = {}  # anchor -> node count of its subtree
    open_: list[tuple[str | None, int]] = []  # (anchor, nodes before it) per open collection
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            nodes += anchors.get(str(event.anchor), 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                anchors[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise ConfigError(source, "(depth)", f"nested deeper than {max_depth} levels")
            open_.append((event.anchor, nodes))
            nodes += 1
        elif isinstance(event, yaml.CollectionEndEvent) and open_:
            depth -= 1
            anchor, before = open_.pop()
            if anchor:
                anchors[anchor] = nodes - before
        if nodes > max_nodes:
            raise ConfigError(source, "(size)", f"expands to more than {max_nodes} nodes (aliases)")


def yaml_fault(e: yaml.YAMLError) -> str:
    """A parser error as a reader wants it: where, what, and the line with a caret under the spot, on their own
    lines (the caret diagram means nothing squashed into one line). The parser's "<unicode string>" is dropped:
    the ConfigError already names the file."""
    if not isinstance(e, yaml.MarkedYAMLError) or e.problem_mark is None:
        return str(e)
    mark = e.problem_mark
    head = f"line {mark.line + 1}, column {mark.column + 1}: {e.problem or 'not valid YAML'}"
    if e.context:
        where = e.context_mark
        at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        head += f", {e.context}{at}"
    snippet = mark.get_snippet(indent=2, max_length=100)
    return f"{head}\n{snippet}" if snippet else head


def load_yaml(
    data: str | bytes,
    source: str,
    *,
    max_bytes: int = MAX_POLICY_BYTES,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
) -> Any:
    """The document in `data`, or ConfigError(source, "(size)"|"(encoding)"|"(depth)"|"(yaml)", why)."""
    text = _text(data, source, max_bytes)
    try:
        _check_shape(text, source, max_depth, max_nodes)
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, "(yaml)", yaml_fault(e)) from None
    except RecursionError:  # not reachable within max_depth; kept so no input can take the process down
        raise ConfigError(source, "(depth)", "nested too deeply") from None
