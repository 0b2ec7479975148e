"""`flux7 token …`: per-agent tokens in the configured database (the `storage_path` of `--config`, or `--db`;
works with the server running or stopped: the store is SQLite, shared by every process), and the machine's
shared secrets in the systemd units' environment files (shared/machine_tokens.py).

    flux7 token issue <agent-id> [--note TEXT] [--expires 30d]   prints the token (once) on stdout
    flux7 token revoke <tok_id | token prefix>
    flux7 token list [--agent ID] [--json]
    flux7 token enable [--root /] [--scopes FILE]      admin + memory tokens into /etc/flux7/{flux7,sup7}.env
    flux7 token rotate [--root /] [--admin] [--memory]  new values for them (both by default)
    flux7 token show [--root /] [--json]                where they are, never their whole values"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from .db import Database
from .errors import ConfigError, Flux7Error
from .machine_tokens import ADMIN, MEMORY, SECRETS, MachineTokens
from .settings import load_settings
from .tokens import AgentToken, TokenStore, parse_expiry

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flux7 token", description="Per-agent bearer tokens.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", default=None, help="flux7 config.yaml (the database is its storage_path)")
    common.add_argument("--db", default=None, help="the database file (default: the config's storage_path)")
    common.add_argument("--json", action="store_true", help="print JSON")
    sub = parser.add_subparsers(dest="action", required=True)
    issue = sub.add_parser("issue", parents=[common], help="issue a token for an agent (shown once)")
    issue.add_argument("agent", help="the agent id the token stands for")
    issue.add_argument("--note", default="", help="what the token is for")
    issue.add_argument("--expires", default="", help="a lifetime such as 30d, 12h or 90m (default: never)")
    revoke = sub.add_parser("revoke", parents=[common], help="revoke a token by id (tok_…) or token prefix")
    revoke.add_argument("ref")
    listing = sub.add_parser("list", parents=[common], help="list tokens (never their secrets)")
    listing.add_argument("--agent", default="", help="only this agent's tokens")
    machine = argparse.ArgumentParser(add_help=False)
    machine.add_argument("--root", default="/", help="the root the environment files are under (default: /)")
    enable = sub.add_parser(
        "enable", parents=[machine], help="generate the admin and memory tokens into the units' environment files"
    )
    enable.add_argument("--scopes", default="", help="the memory scopes file to set as MEM7_SCOPES")
    rotate = sub.add_parser("rotate", parents=[machine], help="replace the admin and/or memory token")
    rotate.add_argument("--admin", action="store_true", help=f"only {ADMIN}")
    rotate.add_argument("--memory", action="store_true", help=f"only {MEMORY}")
    show = sub.add_parser("show", parents=[machine], help="where the machine's tokens are (values masked)")
    show.add_argument("--json", action="store_true", help="print JSON")
    return parser


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


def _store(args: argparse.Namespace, env: Mapping[str, str]) -> TokenStore:
    if args.db:
        path = Path(args.db)
    else:
        settings = load_settings(args.config, env)
        path = settings.resolve_path(settings.storage_path)
    return TokenStore(Database(path))


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.action in ("enable", "rotate", "show"):
        try:
            return _machine(args)
        except OSError as e:
            print(f"flux7 token: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
            return 1
    try:
        store = _store(args, os.environ if env is None else env)
        if args.action == "issue":
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
    except ConfigError as e:
        print(f"flux7 token: config error: {e}", file=sys.stderr)
        return 2
    except Flux7Error as e:
        print(f"flux7 token: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
