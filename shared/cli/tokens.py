"""`flux7 token …`: per-agent tokens in the configured database (the `storage_path` of `--config`, or `--db`;
works with the server running or stopped: the store is SQLite, shared by every process), and the machine's
shared secrets in the systemd units' environment files (shared/cli/machine_tokens.py).

    flux7 token issue <agent-id> [--note TEXT] [--expires 30d]   prints the token (once) on stdout
    flux7 token revoke <tok_id | token prefix | otk_id>   (otk_: an OAuth connection, docs/managed-agents.md)
    flux7 token list [--agent ID] [--json]               (the text also lists OAuth connections)
    flux7 token enable [--root /] [--scopes FILE]      admin + memory tokens into /etc/flux7/{flux7,sup7}.env
    flux7 token rotate [--root /] [--admin] [--memory]  new values for them (both by default)
    flux7 token show [--root /] [--json]                where they are, never their whole values"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import msgspec

from flux7.shared.auth.oauth_connections import CONNECTION_PREFIX, Connection, ConnectionStore, looks_like_oauth_token
from flux7.shared.auth.tokens import AgentToken, TokenStore, parse_expiry
from flux7.shared.cli.config_choice import database_settings
from flux7.shared.cli.kit import CONTEXT, Fail, LazyGroup, UsageFail, namespace, run
from flux7.shared.cli.machine_tokens import ADMIN, MEMORY, SECRETS, MachineTokens
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.store.db import Database, database_for, is_postgresql_url

__all__ = ["main", "token"]


def _machine(args: argparse.Namespace) -> int:
    """enable / rotate / show: files, not the database."""
    tokens = MachineTokens(Path(args.root))
    if args.action == "show":
        report = tokens.show()
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            for path, state in report.items():
                print(f"{path} (mode {state.pop('mode')})")
                for key, value in state.items():
                    print(f"  {key}: {value}")
        return 0
    if args.action == "enable":
        changes = tokens.enable(scopes=args.scopes)
    else:
        picked = [k for k, on in ((ADMIN, args.admin), (MEMORY, args.memory)) if on]
        changes = tokens.rotate(picked or SECRETS)
    for c in changes:
        print(f"{c.file}: {c.key} {c.action}")
    if any(c.action != "kept" for c in changes):
        print("restart the units to use them: systemctl restart flux7 sup7", file=sys.stderr)
    return 0


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t is not None else "-"


def _view(record: AgentToken) -> dict[str, Any]:
    return {**msgspec.to_builtins(record), "state": record.state()}


def _database(args: argparse.Namespace) -> Database:
    if args.db and args.config:
        raise UsageFail("give --db or --config, not both (--db is the file; --config names it as storage_path)")
    if args.db and is_postgresql_url(args.db):
        return Database(args.db)
    if args.db:
        path = Path(args.db)
        if not path.is_file():
            raise Fail(f"{args.db}: no such database (flux7 serve creates it; or pass --config config.yaml)", 2)
        return Database(path)
    # the config's store: its `database` URL (PostgreSQL) or the SQLite file at storage_path
    return database_for(database_settings(args.config))


def _connection_view(c: Connection) -> dict[str, Any]:
    return {**msgspec.to_builtins(c), "state": c.state()}


def _list_connections(connections: ConnectionStore, agent: str) -> None:
    """The OAuth connections (consented clients), after the agent tokens: only when there are any."""
    found = connections.list(agent_id=agent)
    if not found:
        return
    print()
    print(f"{'OAUTH CONNECTION':<17} {'AGENT':<20} {'CLIENT':<24} {'STATE':<8} {'EXPIRES':<20} GRANTED BY")
    for c in found:
        expires = max((t for t in (c.expires_at, c.refresh_expires_at) if t is not None), default=None)
        client = (c.client_name or c.client_id)[:24]
        print(f"{c.id:<17} {c.agent_id:<20} {client:<24} {c.state():<8} {_when(expires):<20} {c.granted_by}")


def _agent_tokens(args: argparse.Namespace) -> int:
    try:
        db = _database(args)
        store, connections = TokenStore(db), ConnectionStore(db)
        if args.action == "revoke" and (args.ref.startswith(CONNECTION_PREFIX) or looks_like_oauth_token(args.ref)):
            c = connections.revoke(args.ref, by="cli")
            view = _connection_view(c)
            print(json.dumps(view) if args.json else f"revoked OAuth connection {c.id} of agent {c.agent_id}")
        elif args.action == "issue":
            issued = store.issue(args.agent, note=args.note, expires_at=parse_expiry(args.expires))
            if args.json:
                print(json.dumps({**_view(issued.record), "token": issued.token}))
            else:
                r = issued.record
                print(issued.token)
                print(
                    f"issued {r.id} for agent {r.agent_id} (expires {_when(r.expires_at)}); "
                    "the token is shown this once: keep it secret",
                    file=sys.stderr,
                )
        elif args.action == "revoke":
            r = store.revoke(args.ref)
            print(json.dumps(_view(r)) if args.json else f"revoked {r.id} ({r.prefix}…) of agent {r.agent_id}")
        else:
            records = store.list(agent_id=args.agent)
            if args.json:
                print(json.dumps([_view(r) for r in records]))
            else:
                print(f"{'ID':<17} {'AGENT':<20} {'TOKEN':<16} {'STATE':<8} {'CREATED':<20} {'EXPIRES':<20} NOTE")
                for r in records:
                    print(
                        f"{r.id:<17} {r.agent_id:<20} {r.prefix + '…':<16} {r.state():<8} "
                        f"{_when(r.created_at):<20} {_when(r.expires_at):<20} {r.note}"
                    )
                _list_connections(connections, args.agent)
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    except Flux7Error as e:
        raise Fail(e.message) from None
    return 0


def _machine_files(args: argparse.Namespace) -> int:
    try:
        return _machine(args)
    except OSError as e:
        raise Fail(f"{e.filename or ''}: {e.strerror or e}") from None


def _where(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="print JSON")(f)
    f = click.option(
        "--db",
        default=None,
        metavar="FILE|URL",
        help="the SQLite file or postgresql:// URL (default: the config's database or storage_path)",
    )(f)
    return click.option(
        "--config",
        "-c",
        default=None,
        metavar="FILE",
        help="flux7 config.yaml (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults); the tokens "
        "live in its database",
    )(f)


_ROOT = click.option("--root", default="/", show_default=True, help="the root the environment files are under")


@click.group("token", cls=LazyGroup, context_settings=CONTEXT)
def token() -> None:
    """Per-agent bearer tokens (issue, list, revoke: in the database, with the server running or not), and the
    machine's admin and memory tokens in the systemd units' environment files (enable, rotate, show)."""


@token.command("issue", context_settings=CONTEXT)
@click.argument("agent")
@click.option("--note", default="", help="what the token is for")
@click.option("--expires", default="", help="a lifetime such as 30d, 12h or 90m (default: never)")
@_where
def issue(agent: str, note: str, expires: str, config: str | None, db: str | None, as_json: bool) -> int:
    """Issue a token for AGENT (printed once on stdout)."""
    args = namespace(action="issue", agent=agent, note=note, expires=expires, config=config, db=db, json=as_json)
    return _agent_tokens(args)


@token.command("revoke", context_settings=CONTEXT)
@click.argument("ref")
@_where
def revoke(ref: str, config: str | None, db: str | None, as_json: bool) -> int:
    """Revoke a token by id (tok_…) or token prefix, or an OAuth connection by id (otk_…)."""
    return _agent_tokens(namespace(action="revoke", ref=ref, config=config, db=db, json=as_json))


@token.command("list", context_settings=CONTEXT)
@click.option("--agent", default="", help="only this agent's tokens")
@_where
def list_(agent: str, config: str | None, db: str | None, as_json: bool) -> int:
    """List tokens (never their secrets)."""
    return _agent_tokens(namespace(action="list", agent=agent, config=config, db=db, json=as_json))


@token.command("enable", context_settings=CONTEXT)
@_ROOT
@click.option("--scopes", default="", help="the memory scopes file to set as MEM7_SCOPES")
def enable(root: str, scopes: str) -> int:
    """Generate the admin and memory tokens into /etc/flux7/{flux7,sup7}.env (kept when already set)."""
    return _machine_files(namespace(action="enable", root=root, scopes=scopes))


@token.command("rotate", context_settings=CONTEXT)
@_ROOT
@click.option("--admin", is_flag=True, help=f"only {ADMIN}")
@click.option("--memory", is_flag=True, help=f"only {MEMORY}")
def rotate(root: str, admin: bool, memory: bool) -> int:
    """Replace the admin and/or memory token (both by default)."""
    return _machine_files(namespace(action="rotate", root=root, admin=admin, memory=memory))


@token.command("show", context_settings=CONTEXT)
@_ROOT
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def show(root: str, as_json: bool) -> int:
    """Where the machine's tokens are (values masked)."""
    return _machine_files(namespace(action="show", root=root, json=as_json))


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    return run(token, argv, prog="flux7 token", env=env)


if __name__ == "__main__":
    raise SystemExit(main())
