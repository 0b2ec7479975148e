"""`mem7 store | search | recall | forget` (also `flux7 memory …`): memories from the terminal, through the same
tools an agent calls (memory_store, memory_search / memory_context, memory_recall, memory_forget).

Which memory, in this order:
1. `--url URL`: the memory server there (its /rpc; the bearer is $MEM7_TOKEN).
2. `--config FILE`, else $FLUX7_CONFIG: flux7's memory. The flux7 server of that config when one answers for it on
   its port (its /rpc, with memory.token, else the local admin token), else in process over the config's database
   and workspace.
3. Otherwise mem7's own, as `mem7` (the stdio server) finds it: the daemon at $MEM7_LISTEN when one answers, else
   in process over $MEM7_DIR (default ~/.mem7).
Without 1 or 2 the memory used is said on stderr. Human output by default, `--json` for programs."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import click
import httpx

from flux7.shared.cli.kit import CONTEXT, Fail, runtime
from flux7.shared.errors import ConfigError, Flux7Error

__all__ = ["forget", "recall", "search", "store"]


class _Memory(Protocol):
    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]: ...


class _Remote:
    """A memory server's /rpc (a `mem7 serve` daemon or a flux7 server)."""

    def __init__(self, url: str, token: str) -> None:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=60.0, trust_env=False)

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        try:
            response = self._client.post("/rpc", json=request)
        except httpx.HTTPError as e:
            raise Fail(f"cannot reach the memory at {self.url}: {e}") from None
        if response.status_code != 200:
            text = response.text.strip()[:200]
            hint = "; give its token ($MEM7_TOKEN, or the config's memory.token)" if response.status_code == 401 else ""
            raise Fail(f"the memory at {self.url} answered HTTP {response.status_code}: {text}{hint}")
        body = response.json()
        if "error" in body:
            raise Fail(f"the memory at {self.url}: {body['error'].get('message', body['error'])}")
        result = body.get("result") or {}
        text = "".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
        return text, bool(result.get("isError"))

    def close(self) -> None:
        self._client.close()


class _InProcess:
    def __init__(self, service: Any) -> None:
        self.service = service

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        # local, as `mem7` on stdio: no identity, so no scope narrows what the terminal's owner sees
        answer: tuple[str, bool] = self.service.call_tool(tool, arguments, authenticated=False)
        return answer

    def close(self) -> None:
        self.service.close()


def _answers(url: str, path: str) -> dict[str, Any] | None:
    try:
        response = httpx.get(f"{url}{path}", timeout=1.0, trust_env=False)
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else {}


def _flux7_memory(config: str, say: Callable[[str], None]) -> _Remote | _InProcess:
    from flux7.shared.auth.admin_token import find_admin_token
    from flux7.shared.cli.config_choice import load_chosen, local_url
    from flux7.shared.memory.service import memory_service_for
    from flux7.shared.settings import choose_config, config_id
    from flux7.shared.store.db import database_for

    env = runtime().env
    choice = choose_config(config, env)
    settings = load_chosen(choice, env)
    if settings.memory.url:  # the mesh talks to a memory role elsewhere: so does this command
        return _Remote(settings.memory.url, settings.memory.token or env.get("MEM7_TOKEN", ""))
    if not settings.memory.enabled:
        raise Fail(f"the memory role is off in {choice.why()} (memory.enabled: false)", 2)
    url = local_url(settings)
    health = _answers(url, "/health")
    if health is not None and health.get("config") == config_id(settings):
        token = settings.memory.token or find_admin_token(url, env).value
        return _Remote(url, token)
    if health is not None:
        say(f"note: the flux7 server at {url} runs another config: using {choice.why()} in process")
    db = database_for(settings)
    service = memory_service_for(settings, db)
    assert service is not None  # memory enabled, no memory.url
    return _InProcess(service)


def _mem7_memory(say: Callable[[str], None]) -> _Remote | _InProcess:
    from flux7.shared.memory.cli import _config, _listen, _service, listen_address

    env = runtime().env
    config = _config()
    host, port = listen_address(_listen(None))
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    if _answers(url, "/healthz") is not None:
        say(f"memory: the mem7 daemon at {url} (MEM7_LISTEN; a flux7 server's memory: --config)")
        return _Remote(url, env.get("MEM7_TOKEN", ""))
    say(f"memory: mem7's own in {config.dir} (MEM7_DIR; no daemon at {url}; a flux7 server's memory: --config)")
    return _InProcess(_service(config))


@contextmanager
def _memory(url: str | None, config: str | None) -> Iterator[_Memory]:
    rt = runtime()
    prog = click.get_current_context().command_path

    def say(line: str) -> None:
        print(f"{prog}: {line}", file=rt.err)

    try:
        if url:
            chosen: _Remote | _InProcess = _Remote(url, rt.env.get("MEM7_TOKEN", ""))
        elif config or rt.env.get("FLUX7_CONFIG"):
            chosen = _flux7_memory(config or rt.env["FLUX7_CONFIG"], say)
        else:
            chosen = _mem7_memory(say)
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    except Flux7Error as e:
        raise Fail(e.message) from None
    try:
        yield chosen
    finally:
        chosen.close()


def _where(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="print JSON (for programs)")(f)
    f = click.option(
        "--config",
        "-c",
        default=None,
        metavar="FILE",
        help="flux7's memory: this config's server, else its database (default: $FLUX7_CONFIG, else mem7's own)",
    )(f)
    return click.option("--url", default=None, help="a memory server to ask (its /rpc; bearer $MEM7_TOKEN)")(f)


_TAG = click.option("--tag", "tags", multiple=True, metavar="TAG", help="a tag (repeat; all must match)")


def _ask(memory: _Memory, tool: str, arguments: dict[str, Any]) -> str:
    text, is_error = memory.call(tool, {k: v for k, v in arguments.items() if v not in (None, "", [], ())})
    if is_error:
        raise Fail(text)
    return text


def _out(text: str) -> None:
    out = runtime().out
    print(text.rstrip("\n"), file=out)


_STORED = re.compile(r"^Memory '(?P<key>.*)' (?P<action>created|updated) \((?P<total>\d+) total entries\)$")
_REMOVED = re.compile(r"^Removed (?P<removed>\d+) memory\(ies\)\. (?P<remaining>\d+) remaining\.$")


@click.command("store", context_settings=CONTEXT)
@click.argument("key")
@click.argument("value")
@_TAG
@click.option("--agent", default="", help="who stores it (recorded with the entry)")
@click.option("--ttl", type=click.IntRange(min=0), default=0, help="seconds until it expires (0: never)")
@click.option("--long-term", is_flag=True, help="keep it in MEMORY.md: it never expires")
@_where
def store(
    key: str,
    value: str,
    tags: tuple[str, ...],
    agent: str,
    ttl: int,
    long_term: bool,
    url: str | None,
    config: str | None,
    as_json: bool,
) -> int:
    """Store VALUE under KEY (an existing key is updated). VALUE `-` reads it from stdin."""
    if value == "-":
        value = sys.stdin.read()
    arguments = {"key": key, "value": value, "tags": list(tags), "agent": agent, "ttl": ttl or None}
    if long_term:
        arguments["long_term"] = True
    with _memory(url, config) as memory:
        text = _ask(memory, "memory_store", arguments)
    stored = _STORED.match(text.strip())
    if as_json:
        _out(
            json.dumps({"key": stored["key"], "action": stored["action"], "total": int(stored["total"])})
            if stored
            else json.dumps({"text": text})
        )
    else:
        _out(text)
    return 0


@click.command("search", context_settings=CONTEXT)
@click.argument("query")
@click.option(
    "--mode",
    type=click.Choice(["natural", "raw"]),
    default="natural",
    show_default=True,
    help='natural: plain words, stemmed; raw: FTS5 syntax (foo*, AND, OR, NOT, "phrases")',
)
@_TAG
@click.option("--agent", default="", help="only memories stored by this agent")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="at most this many")
@_where
def search(
    query: str,
    mode: str,
    tags: tuple[str, ...],
    agent: str,
    limit: int,
    url: str | None,
    config: str | None,
    as_json: bool,
) -> int:
    """Search memories by meaning and words, best first (--json: an array of entries)."""
    arguments = {"query": query, "mode": mode, "tags": list(tags), "agent": agent, "limit": limit}
    with _memory(url, config) as memory:
        if as_json:
            text = _ask(memory, "memory_context", arguments)
            _out(json.dumps(json.loads(text), indent=2))
        else:
            _out(_ask(memory, "memory_search", arguments))
    return 0


@click.command("recall", context_settings=CONTEXT)
@click.argument("key", required=False, default="")
@_TAG
@click.option("--agent", default="", help="only memories stored by this agent")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="at most this many")
@_where
def recall(
    key: str, tags: tuple[str, ...], agent: str, limit: int, url: str | None, config: str | None, as_json: bool
) -> int:
    """Recall memories by KEY, tags or agent, newest first."""
    if not (key or tags or agent):
        raise click.UsageError("give a KEY, --tag or --agent")
    arguments = {"key": key, "tags": list(tags), "agent": agent, "limit": limit}
    with _memory(url, config) as memory:
        text = _ask(memory, "memory_recall", arguments)
    _out(json.dumps({"text": text}) if as_json else text)
    return 0


@click.command("forget", context_settings=CONTEXT)
@click.argument("key", required=False, default="")
@_TAG
@click.option("--agent", default="", help="who forgets (recorded with the deletion)")
@_where
def forget(key: str, tags: tuple[str, ...], agent: str, url: str | None, config: str | None, as_json: bool) -> int:
    """Forget the memory KEY, or every memory with all the --tag given. Earlier states stay readable (as_of)."""
    if not (key or tags):
        raise click.UsageError("give a KEY or --tag")
    with _memory(url, config) as memory:
        text = _ask(memory, "memory_forget", {"key": key, "tags": list(tags), "agent": agent})
    if as_json:
        removed = _REMOVED.match(text.strip())
        counts = {"removed": int(removed["removed"]), "remaining": int(removed["remaining"])} if removed else None
        _out(json.dumps(counts or {"removed": 0, "text": text}))
    else:
        _out(text)
    return 0
