"""`mem7`: the memory role's entry point. The only place that reads MEM7_* from the environment.

mem7 [mcp]                MCP stdio server (relays to a daemon that already answers at MEM7_LISTEN)
mem7 store | search | recall | forget   memories from the terminal (shared/memory/cli_entries.py)
mem7 serve [--listen :9070] [--token T] [--scopes FILE] [--workers N]
mem7 rescan | prune | verify [--json] | export [--to DIR] [--force]   (each takes --db FILE)
Also `flux7 memory …`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import msgspec

from flux7.shared.cli.kit import CONTEXT, Fail, LazyGroup, WebApps, run, runtime, web_apps
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.memory.config import MemoryConfig
from flux7.shared.memory.fts import TEXT_SEARCH_CONFIGS
from flux7.shared.memory.service import MemoryService
from flux7.shared.store.db import Database, is_postgresql_url

__all__ = ["config_from_env", "listen_address", "main", "memory", "worker_service"]

log = logging.getLogger("flux7.memory")

_WORKER_CONFIG = "MEM7_SERVE_CONFIG"  # how `mem7 serve` hands its validated config to granian's workers


def config_from_env(env: Mapping[str, str], **overrides: Any) -> MemoryConfig:
    directory = env.get("MEM7_DIR") or str(Path.home() / ".mem7")
    raw_max = env.get("MEM7_MAX_ENTRIES", "")
    try:
        max_entries = int(raw_max) if raw_max else 10000
    except ValueError:
        raise ConfigError("(environment)", "MEM7_MAX_ENTRIES", f"not a number: {raw_max!r}") from None
    values: dict[str, Any] = {
        "dir": str(Path(directory).expanduser()),
        "max_entries": max_entries if max_entries > 0 else 10000,
        "chain_key": env.get("MEM7_CHAIN_KEY", ""),
        "token": env.get("MEM7_TOKEN", ""),
        "scopes_file": env.get("MEM7_SCOPES", ""),
        "hybrid": env.get("MEM7_HYBRID", "1").lower() not in ("0", "false", "no", "off"),
        "embed_url": env.get("MEM7_EMBED_URL", ""),
        "embed_model": env.get("MEM7_EMBED_MODEL", ""),
        "embed_provider": env.get("MEM7_EMBED_PROVIDER", ""),
        "embed_key": env.get("MEM7_EMBED_KEY", ""),
        "rerank_url": env.get("MEM7_RERANK_URL", ""),
        "rerank_model": env.get("MEM7_RERANK_MODEL", ""),
        "min_similarity": _float_env(env, "MEM7_MIN_SIMILARITY"),
        "database": env.get("MEM7_DATABASE_URL", ""),
        "text_search_config": _text_search_config(env),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return MemoryConfig(**values)


def _float_env(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError("(environment)", name, f"not a number: {raw!r}") from None
    if not -1.0 <= value <= 1.0:
        raise ConfigError("(environment)", name, f"a cosine similarity is between -1 and 1, got {value}")
    return value


def _text_search_config(env: Mapping[str, str]) -> str:
    raw = env.get("MEM7_TEXT_SEARCH_CONFIG", "") or "simple"
    if raw not in TEXT_SEARCH_CONFIGS:
        raise ConfigError(
            "(environment)", "MEM7_TEXT_SEARCH_CONFIG", f"want {' or '.join(TEXT_SEARCH_CONFIGS)}, got {raw!r}"
        )
    return raw


def listen_address(listen: str) -> tuple[str, int]:
    """Go's listen syntax: `:9070` (every interface), `host:port`, `[::1]:port`."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError("(arguments)", "--listen", f"want [host]:port, got {listen!r}")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


_DB_OVERRIDE: list[str] = []  # `--db`: a flux7 database (memory beside the mesh) instead of <MEM7_DIR>/index.db


def _database(config: MemoryConfig) -> Database:
    """`--db`, else MEM7_DATABASE_URL (a PostgreSQL database), else <MEM7_DIR>/index.db."""
    if _DB_OVERRIDE:
        return Database(_DB_OVERRIDE[0])
    return Database(config.database or Path(config.dir) / "index.db")


def _service(config: MemoryConfig) -> MemoryService:
    return MemoryService(config, _database(config))


def worker_service() -> MemoryService:
    """In each `mem7 serve` worker: the service over the config the parent validated (from the environment).
    The worker's ASGI factory (functions/memory.py `serve_app`) wraps it."""
    config = msgspec.json.decode(os.environ[_WORKER_CONFIG].encode(), type=MemoryConfig)
    return _service(config)


def _serve(config: MemoryConfig, listen: str, workers: int, apps: WebApps) -> int:
    from granian import Granian
    from granian.constants import Interfaces

    from flux7.shared.ports import PortUnavailable, check_listen

    host, port = listen_address(listen)
    try:
        check_listen(host, port)  # before the workspace and index are created
    except PortUnavailable as e:
        raise ConfigError("(arguments)", "--listen", str(e)) from None
    _service(config).close()  # fail here, in the foreground, on a bad workspace or scopes file
    if not config.token:
        log.warning("serving without authentication (no --token / MEM7_TOKEN set)")
    log.info("mem7 listening on %s:%d (data dir %s)", host, port, config.dir)
    os.environ[_WORKER_CONFIG] = msgspec.json.encode(config).decode()
    from flux7.shared.settings import STOP_TIMEOUT_SECONDS

    Granian(
        apps.memory_factory,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=workers,
        factory=True,
        log_access=False,
        workers_kill_timeout=STOP_TIMEOUT_SECONDS,  # a stop bounded as flux7 serve's by default
    ).serve()
    return 0


def _progress(title: str) -> tuple[Any, Callable[[str, int, int], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"))
    task = bar.add_task("", total=None)

    def advance(name: str, done: int, total: int) -> None:
        bar.update(task, total=total, completed=done, description=name)

    return bar, advance


def _rescan(config: MemoryConfig) -> int:
    service = _service(config)
    bar, advance = _progress("rescan")
    with bar:
        count = service.rescan(advance)
    print(f"rescan complete, {count} live entries in index")
    service.close()
    return 0


def _prune(config: MemoryConfig) -> int:
    service = _service(config)
    print(f"pruned {service.store.prune()} expired memories")
    service.close()
    return 0


def _verify(config: MemoryConfig, as_json: bool) -> int:
    from flux7.shared.memory.verify import VerifyRefused

    try:
        report = verify_report(config)
    except VerifyRefused as e:
        raise Fail(str(e), 2) from None
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(report.to_dict()), indent=2).decode())
    else:
        print(f"{report.entries} entries: {report.sealed} sealed, {report.legacy} written before the chain")
        print("seals: HMAC-SHA256 with MEM7_CHAIN_KEY" if report.keyed else "seals: SHA-256 (no MEM7_CHAIN_KEY)")
        if report.brk is None:
            print("chain holds")
        else:
            b = report.brk
            print(f"chain broken at {b.file}:{b.line} ({b.entity}): {b.reason}")
    return 0 if report.brk is None else 1


def verify_report(config: MemoryConfig) -> Any:
    """`--db FILE`: the journal in that database. Otherwise the markdown workspace under MEM7_DIR, checked
    against its index.db's head when there is one (verify works on a workspace whose index is missing)."""
    from flux7.shared.memory.verify import database_head, verify_database, verify_store, verify_workspace

    key = config.chain_key.encode()
    url = _DB_OVERRIDE[0] if _DB_OVERRIDE else config.database
    if is_postgresql_url(url):
        db = Database(url, migrate=False)
        try:
            if _DB_OVERRIDE:
                return verify_store(db, key)
            head = db.query_one("SELECT head FROM memory_chain WHERE id = 1") if db.has_table("memory_chain") else None
        finally:
            db.close()
        return verify_workspace(Path(config.dir) / "workspace", key, str(head[0]) if head else "")
    if _DB_OVERRIDE:
        return verify_database(Path(_DB_OVERRIDE[0]).expanduser(), key)
    root = Path(config.dir)
    return verify_workspace(root / "workspace", key, database_head(root / "index.db"))


def _export(config: MemoryConfig, to: str | None, force: bool) -> int:
    service = _service(config)
    bar, advance = _progress("export")
    with bar:
        written = service.store.export(Path(to).expanduser() if to else Path(config.dir), force=force, progress=advance)
    print(f"exported {len(written)} workspace file(s) from the journal")
    service.close()
    return 0


_DB = click.option(
    "--db",
    default=None,
    metavar="FILE",
    help="the SQLite file or postgresql:// URL (default MEM7_DATABASE_URL, else <MEM7_DIR>/index.db; "
    "under flux7 serve: its database)",
)


def _config(**overrides: Any) -> MemoryConfig:
    try:
        return config_from_env(runtime().env, **overrides)
    except ConfigError as e:
        raise Fail(str(e), 2) from None


def _use_db(db: str | None, *, must_exist: bool) -> None:
    """`--db FILE`: that database instead of <MEM7_DIR>/index.db. A command that only reads or trims a database
    refuses a path where there is none (it would create an empty one and report on nothing)."""
    if db and must_exist and not is_postgresql_url(db) and not Path(db).expanduser().is_file():
        raise Fail(f"{db}: no such file (give the database flux7 serve writes: its storage_path)", 2)
    _DB_OVERRIDE[:] = [db] if db else []


def _listen(listen: str | None) -> str:
    return listen or runtime().env.get("MEM7_LISTEN") or ":9070"


def _guard(action: Callable[[], int]) -> int:
    try:
        return action()
    except ConfigError as e:
        raise Fail(str(e), 2) from None
    except Flux7Error as e:
        raise Fail(e.message) from None


def _stdio(config: MemoryConfig, listen: str) -> int:
    from flux7.shared.memory.stdio import main_stdio

    host, port = listen_address(listen)
    relay_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    main_stdio(lambda: _service(config), f"http://{relay_host}:{port}", config.token)
    return 0


_ENTRIES = "flux7.shared.memory.cli_entries"


@click.group(
    "memory",
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings=CONTEXT,
    lazy={
        "store": (f"{_ENTRIES}:store", "Store a memory under a key (an existing key is updated)."),
        "search": (f"{_ENTRIES}:search", "Search memories by meaning and words, best first."),
        "recall": (f"{_ENTRIES}:recall", "Recall memories by key, tags or agent, newest first."),
        "forget": (f"{_ENTRIES}:forget", "Forget a memory by key, or every memory with some tags."),
    },
)
@click.pass_context
def memory(ctx: click.Context) -> int:
    """Governed memory for AI agents: store, search, recall and forget memories; the daemon, the MCP stdio
    server, and the workspace's upkeep. Settings come from MEM7_* variables (MEM7_DIR, MEM7_TOKEN,
    MEM7_CHAIN_KEY…; docs/memory.md); store, search, recall and forget use flux7's memory with --config or
    $FLUX7_CONFIG.

    Run as `mem7` with no command, it is the MCP stdio server (as `mem7 mcp`)."""
    logging.basicConfig(level=logging.INFO, stream=runtime().err, format="mem7 %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one "HTTP Request" line per relayed message is noise
    if ctx.invoked_subcommand is not None:
        return 0
    if ctx.parent is None:  # `mem7` alone: what MCP clients launch
        return _guard(lambda: _stdio(_config(), _listen(None)))
    click.echo(ctx.get_help())
    return 0


@memory.command("mcp", context_settings=CONTEXT)
@click.option(
    "--listen", default=None, help="[host]:port of a running daemon to relay to (default MEM7_LISTEN or :9070)"
)
def mcp(listen: str | None) -> int:
    """The memory MCP stdio server.

    It relays to a daemon that already answers at --listen, else serves in process."""
    return _guard(lambda: _stdio(_config(), _listen(listen)))


@memory.command("serve", context_settings=CONTEXT)
@click.option("--listen", default=None, help="[host]:port (default MEM7_LISTEN or :9070)")
@click.option("--token", default=None, help="bearer token (default MEM7_TOKEN)")
@click.option("--scopes", default=None, metavar="FILE", help="scopes file (default MEM7_SCOPES)")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="worker processes")
def serve(listen: str | None, token: str | None, scopes: str | None, workers: int) -> int:
    """The memory HTTP daemon on its own.

    flux7 serve also answers memory on the mesh's port; this runs memory without the mesh."""
    apps = web_apps()
    return _guard(lambda: _serve(_config(token=token, scopes_file=scopes), _listen(listen), workers, apps))


@memory.command("rescan", context_settings=CONTEXT)
@_DB
def rescan(db: str | None) -> int:
    """Drop the index and replay the markdown workspace into it."""
    _use_db(db, must_exist=False)
    return _guard(lambda: _rescan(_config()))


@memory.command("prune", context_settings=CONTEXT)
@_DB
def prune(db: str | None) -> int:
    """Purge TTL-expired entries from the index."""
    _use_db(db, must_exist=True)
    return _guard(lambda: _prune(_config()))


@memory.command("verify", context_settings=CONTEXT)
@click.option("--db", default=None, metavar="FILE", help="check the memory journal in this SQLite file instead")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def verify(db: str | None, as_json: bool) -> int:
    """Check the hash chain that seals every memory.

    Checks the markdown workspace, or with --db the journal in that database. Exit 1 at a break."""
    _use_db(db, must_exist=False)  # verify_report names a missing file itself
    return _guard(lambda: _verify(_config(), as_json))


@memory.command("export", context_settings=CONTEXT)
@click.option("--to", default=None, metavar="DIR", help="directory to write workspace/ under (default MEM7_DIR)")
@click.option("--force", is_flag=True, help="overwrite daily files that differ")
@_DB
def export(to: str | None, force: bool, db: str | None) -> int:
    """Re-create the markdown workspace from the journal in the database."""
    _use_db(db, must_exist=True)
    return _guard(lambda: _export(_config(), to, force))


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None, apps: WebApps | None = None) -> int:
    return run(memory, argv, prog="mem7", env=env, apps=apps)


if __name__ == "__main__":
    raise SystemExit(main())
