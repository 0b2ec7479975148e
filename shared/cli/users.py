"""`flux7 user …`: named humans and their roles, in the configured database (as `flux7 token …`: the store of
`--config` or `--db`, with the server running or stopped).

    flux7 user add NAME --role owner|admin|approver|viewer [--approve-tools GLOB…] [--approve-agents GLOB…]
    flux7 user list [--json]
    flux7 user disable NAME
    flux7 user rotate NAME          a new personal token; the old one stops working

`add` and `rotate` print the personal token (`f7u_…`) once on stdout. Whoever runs these holds the database, so
they act as the owner; the changes are recorded as `owner:cli`."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import msgspec

from flux7.shared.auth.users import ROLES, User, UserStore
from flux7.shared.cli.config_choice import database_settings
from flux7.shared.cli.kit import CONTEXT, Fail, UsageFail, run
from flux7.shared.errors import ConfigError, Flux7Error
from flux7.shared.store.db import Database, database_for, is_postgresql_url

__all__ = ["main", "user"]

ACTOR = "owner:cli"


def _store(config: str | None, db: str | None) -> UserStore:
    if db and config:
        raise UsageFail("give --db or --config, not both (--db is the file; --config names it as storage_path)")
    if db and is_postgresql_url(db):
        return UserStore(Database(db))
    if db:
        if not Path(db).is_file():
            raise Fail(f"{db}: no such database (flux7 serve creates it; or pass --config config.yaml)", 2)
        return UserStore(Database(db))
    return UserStore(database_for(database_settings(config)))


def _guarded(action: Callable[[], int]) -> int:
    try:
        return action()
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    except Flux7Error as e:
        raise Fail(e.message, 2 if e.status_code == 400 else 1) from None


def _line(u: User) -> str:
    scope = ""
    if u.approve_tools or u.approve_agents:
        scope = f" tools={','.join(u.approve_tools) or '*'} agents={','.join(u.approve_agents) or '*'}"
    state = "disabled" if u.disabled_at is not None else "active"
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(u.created_at))
    return f"{u.name:<20} {u.role:<9} {state:<9} {u.source:<6} {created}{scope}"


def _where(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="print JSON")(f)
    f = click.option("--db", default=None, metavar="FILE|URL", help="the SQLite file or postgresql:// URL")(f)
    return click.option(
        "--config",
        "-c",
        default=None,
        metavar="FILE",
        help="flux7 config.yaml (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults)",
    )(f)


@click.group("user", context_settings=CONTEXT)
def user() -> None:
    """Named humans: their roles, their personal tokens (owner, admin, approver, viewer)."""


@user.command("add", context_settings=CONTEXT)
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES), help="what the user may do")
@click.option("--approve-tools", multiple=True, metavar="GLOB", help="an approver's tools (repeat; default any)")
@click.option("--approve-agents", multiple=True, metavar="GLOB", help="an approver's agents (repeat; default any)")
@click.option("--email", default="", help="to map the user to a single sign-on or Slack identity")
@_where
def add(
    name: str,
    role: str,
    approve_tools: tuple[str, ...],
    approve_agents: tuple[str, ...],
    email: str,
    config: str | None,
    db: str | None,
    as_json: bool,
) -> int:
    """Add a user; prints their personal token (f7u_…) once."""

    def act() -> int:
        issued = _store(config, db).add(
            name, role, approve_tools=approve_tools, approve_agents=approve_agents, email=email, by=ACTOR
        )
        if as_json:
            print(json.dumps(msgspec.to_builtins(issued.user.view(issued.token))))
        else:
            print(issued.token)
            print(
                f"added {issued.user.name} ({issued.user.role}); the token is shown this once: keep it secret",
                file=sys.stderr,
            )
        return 0

    return _guarded(act)


@user.command("list", context_settings=CONTEXT)
@_where
def list_(config: str | None, db: str | None, as_json: bool) -> int:
    """List users and their roles (never their tokens)."""

    def act() -> int:
        users = _store(config, db).list()
        if as_json:
            print(json.dumps(msgspec.to_builtins([u.view() for u in users])))
        else:
            print(f"{'NAME':<20} {'ROLE':<9} {'STATE':<9} {'FROM':<6} CREATED")
            for u in users:
                print(_line(u))
        return 0

    return _guarded(act)


@user.command("disable", context_settings=CONTEXT)
@click.argument("name")
@_where
def disable(name: str, config: str | None, db: str | None, as_json: bool) -> int:
    """Disable a user: their tokens and console sessions stop working at once."""

    def act() -> int:
        u = _store(config, db).disable(name)
        print(json.dumps(msgspec.to_builtins(u.view())) if as_json else f"disabled {u.name}")
        return 0

    return _guarded(act)


@user.command("rotate", context_settings=CONTEXT)
@click.argument("name")
@_where
def rotate(name: str, config: str | None, db: str | None, as_json: bool) -> int:
    """A new personal token for NAME (printed once); the old one stops working."""

    def act() -> int:
        issued = _store(config, db).rotate(name)
        print(json.dumps(msgspec.to_builtins(issued.user.view(issued.token))) if as_json else issued.token)
        return 0

    return _guarded(act)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    return run(user, argv, prog="flux7 user", env=env)


if __name__ == "__main__":
    raise SystemExit(main())
