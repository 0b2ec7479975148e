"""`mem7`: the memory role's entry point. The only place that reads MEM7_* from the environment.

mem7                      MCP stdio server (relays to a daemon that already answers at MEM7_LISTEN)
mem7 serve [--listen :9070] [--token T] [--scopes FILE] [--workers N]
mem7 rescan | prune | verify [--json] | export [--to DIR] [--force]   (each takes --db FILE)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from shared.db import Database
from shared.errors import ConfigError, Flux7Error

from .config import MemoryConfig
from .service import MemoryService

__all__ = ["config_from_env", "listen_address", "main", "serve_app"]

log = logging.getLogger("flux7.memory")

SUBCOMMANDS = ("serve", "rescan", "prune", "verify", "export")
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


def listen_address(listen: str) -> tuple[str, int]:
    """Go's listen syntax: `:9070` (every interface), `host:port`, `[::1]:port`."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError("(arguments)", "--listen", f"want [host]:port, got {listen!r}")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


_DB_OVERRIDE: list[str] = []  # `--db`: a flux7 database (memory beside the mesh) instead of <MEM7_DIR>/index.db


def _database(config: MemoryConfig) -> Database:
    return Database(_DB_OVERRIDE[0] if _DB_OVERRIDE else Path(config.dir) / "index.db")


def _service(config: MemoryConfig) -> MemoryService:
    return MemoryService(config, _database(config))


def serve_app() -> Any:
    """granian's factory in each worker: the config the parent validated, from the environment."""
    from functions.memory import create_memory_app

    config = msgspec.json.decode(os.environ[_WORKER_CONFIG].encode(), type=MemoryConfig)
    return create_memory_app(_service(config))


def _serve(config: MemoryConfig, listen: str, workers: int) -> int:
    from granian import Granian
    from granian.constants import Interfaces

    host, port = listen_address(listen)
    _service(config).close()  # fail here, in the foreground, on a bad workspace or scopes file
    if not config.token:
        log.warning("serving without authentication (no --token / MEM7_TOKEN set)")
    log.info("mem7 listening on %s:%d (data dir %s)", host, port, config.dir)
    os.environ[_WORKER_CONFIG] = msgspec.json.encode(config).decode()
    Granian(
        "shared.memory.cli:serve_app",
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=workers,
        factory=True,
        log_access=False,
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
    from .verify import VerifyRefused

    try:
        report = verify_report(config)
    except VerifyRefused as e:
        print(f"mem7 verify: {e}", file=sys.stderr)
        return 2
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
    from .verify import database_head, verify_database, verify_workspace

    key = config.chain_key.encode()
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mem7", description="governed memory for AI agents")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="the HTTP daemon")
    serve.add_argument("--listen", default=None, help="[host]:port (default MEM7_LISTEN or :9070)")
    serve.add_argument("--token", default=None, help="bearer token (default MEM7_TOKEN)")
    serve.add_argument("--scopes", default=None, help="scopes JSON file (default MEM7_SCOPES)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    db_help = "the SQLite file (default <MEM7_DIR>/index.db; under flux7 serve: its storage_path)"
    sub.add_parser("rescan", help="drop the index and replay the markdown").add_argument("--db", help=db_help)
    sub.add_parser("prune", help="purge TTL-expired entries from the index").add_argument("--db", help=db_help)
    verify = sub.add_parser("verify", help="check the workspace's hash chain (with --db: the database's journal)")
    verify.add_argument("--db", help="check the memory journal in this SQLite file instead of the workspace")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    export = sub.add_parser("export", help="re-create the workspace from the journal in the database")
    export.add_argument("--to", default=None, help="directory to write workspace/ under (default MEM7_DIR)")
    export.add_argument("--force", action="store_true", help="overwrite daily files that differ")
    export.add_argument("--db", help=db_help)
    return parser


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="mem7 %(levelname)s %(message)s")
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        print(f'mem7: unknown subcommand "{argv[0]}" (valid: {", ".join(SUBCOMMANDS)})', file=sys.stderr)
        return 1
    args = _parser().parse_args(argv)
    _DB_OVERRIDE[:] = [args.db] if getattr(args, "db", None) else []
    listen = getattr(args, "listen", None) or env.get("MEM7_LISTEN") or ":9070"
    try:
        config = config_from_env(env, token=getattr(args, "token", None), scopes_file=getattr(args, "scopes", None))
        if args.command is None:
            from .stdio import main_stdio

            host, port = listen_address(listen)
            relay_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
            main_stdio(lambda: _service(config), f"http://{relay_host}:{port}", config.token)
            return 0
        if args.command == "serve":
            return _serve(config, listen, max(1, args.workers))
        if args.command == "rescan":
            return _rescan(config)
        if args.command == "prune":
            return _prune(config)
        if args.command == "verify":
            return _verify(config, args.json)
        return _export(config, args.to, args.force)
    except ConfigError as e:
        print(f"mem7: {e}", file=sys.stderr)
        return 2
    except Flux7Error as e:
        print(f"mem7: {e.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
