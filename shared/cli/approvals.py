"""`mesh` (also `flux7 approvals`): the approval CLI.

    mesh pending [--wait S] | show <id> | approve <id> | deny <id> | watch
    mesh halt --agent <glob> | --session <id> | --all [--reason R] | halts | resume <id>

Env: MESH_URL (default http://localhost:9090); FLUX7_TOKEN, your personal token (`flux7 user add`: the server
records your decisions as `user:<name>`), else MESH_ADMIN_TOKEN. Without either, a loopback MESH_URL gets the
server's generated admin token from its file (FLUX7_ADMIN_TOKEN_FILE, else the data directory of the config every
command finds: FLUX7_CONFIG, ./config.yaml, the built-in defaults; shared/auth/admin_token.py). The body's
`resolved_by: cli:$USER` is kept as a note only."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import click

from flux7.shared.cli.control_plane import DEFAULT_URL, Client, MeshError, connect, refusal
from flux7.shared.cli.kit import CONTEXT, Fail, LazyGroup, UsageFail, namespace, run, runtime

__all__ = ["Client", "MeshError", "approvals", "main"]


def _table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(), file=out)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _approval_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            a["id"][:8],
            a.get("agent_id", ""),
            a.get("tool", ""),
            a.get("remaining", a.get("status", "")),
            "yes" if a.get("injection_risk") else "",
            _short(a.get("params")),
        ]
        for a in items
    ]


_APPROVAL_HEADERS = ["ID", "AGENT", "TOOL", "REMAINING", "RISK", "PARAMS"]
WAIT_POLL = 0.1  # seconds between looks at the queue while `pending --wait` waits


def _pending(client: Client, out: TextIO, wait: float = 0.0) -> None:
    deadline = time.monotonic() + wait
    items = client.approvals()
    while not items and time.monotonic() < deadline:  # a held call on its way to the queue (scripts, docs)
        time.sleep(min(WAIT_POLL, max(0.0, deadline - time.monotonic())))
        items = client.approvals()
    if not items:
        print("No pending approvals.", file=out)
        if wait:
            raise Fail(f"no approval became pending within {wait:g}s")
        return
    _table(_approval_rows(items), _APPROVAL_HEADERS, out)


def _show(client: Client, approval_id: str, out: TextIO) -> None:
    a = client.approval(approval_id)
    for key in (
        "id",
        "agent_id",
        "tool",
        "status",
        "policy_rule",
        "created_at",
        "remaining",
        "resolved_by",
        "resolved_at",
        "reasoning",
        "confidence",
        "trace_id",
    ):
        if key in a:
            print(f"{key + ':':<14}{a[key]}", file=out)
    if a.get("injection_risk"):
        print(f"{'injection:':<14}possible prompt injection in the arguments", file=out)
    print("params:", file=out)
    print(json.dumps(a.get("params"), indent=2, ensure_ascii=False), file=out)
    grants = a.get("active_grants") or []
    if grants:
        print("active grants:", file=out)
        _table(
            [[g["id"][:8], g["agent"], g["tools"], g["remaining"]] for g in grants],
            ["ID", "AGENT", "TOOLS", "REMAINING"],
            out,
        )
    traces = a.get("recent_traces") or []
    if traces:
        print("recent calls by this agent:", file=out)
        _table(
            [
                [t.get("timestamp", "")[:19], t.get("tool", ""), t.get("policy", ""), str(t.get("status_code", ""))]
                for t in traces
            ],
            ["TIME", "TOOL", "POLICY", "STATUS"],
            out,
        )


def _resolve(client: Client, approval_id: str, decision: str, reason: str, out: TextIO) -> None:
    result = client.resolve(approval_id, decision, resolved_by=f"cli:{_user()}", reasoning=reason or None)
    print(f"{result['id']} {result['status']}", file=out)


def _watch(client: Client, interval: float, out: TextIO, rounds: int | None = None) -> None:
    """Print each approval as it arrives and as it leaves the queue, until interrupted."""
    seen: dict[str, dict[str, Any]] = {}
    print(f"Watching {client.url} for approvals (Ctrl-C to stop)…", file=out, flush=True)
    n = 0
    while rounds is None or n < rounds:
        n += 1
        current = {a["id"]: a for a in client.approvals()}
        for approval_id, a in current.items():
            if approval_id not in seen:
                stamp = time.strftime("%H:%M:%S")
                risk = "  [injection risk]" if a.get("injection_risk") else ""
                print(
                    f"{stamp}  NEW   {approval_id[:8]}  {a['agent_id']}  {a['tool']}  "
                    f"{_short(a.get('params'), 80)}  ({a.get('remaining', '')} left){risk}",
                    file=out,
                    flush=True,
                )
        for approval_id in seen.keys() - current.keys():
            gone = client.approval(approval_id)
            by = f" by {gone['resolved_by']}" if gone.get("resolved_by") else ""
            print(
                f"{time.strftime('%H:%M:%S')}  {gone['status'].upper():<5} {approval_id[:8]}{by}", file=out, flush=True
            )
        seen = current
        if rounds is None or n < rounds:
            time.sleep(interval)


def _halt(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    if args.all:
        scope, target = "all", ""
    elif args.agent:
        scope, target = "agent", args.agent
    else:
        scope, target = "session", args.session
    body = {"scope": scope, "target": target, "reason": args.reason or "", "by": f"cli:{_user()}"}
    result = client.request("POST", "/halts", json=body)
    halt = result["halt"]
    if result.get("already_active"):
        print(f"Stop {halt['id']} is already in force.", file=out)
        return
    what = "everyone" if scope == "all" else f"{scope} {target}"
    print(
        f"Stopped {what}: halt {halt['id']} ({result['revoked_grants']} grant(s) revoked, "
        f"{result['denied_approvals']} pending approval(s) denied).",
        file=out,
    )
    print(f"Resume with: mesh resume {halt['id'][:8]}", file=out)


def _halts(client: Client, out: TextIO) -> None:
    items = client.request("GET", "/halts")
    if not items:
        print("No stop in force.", file=out)
        return
    _table(
        [
            [
                h["id"][:8],
                h["scope"],
                h.get("target", "*"),
                h.get("created_by", ""),
                h["created_at"][:19],
                h.get("reason", ""),
            ]
            for h in items
        ],
        ["ID", "SCOPE", "TARGET", "BY", "SINCE", "REASON"],
        out,
    )


def _resume(client: Client, halt_id: str, out: TextIO) -> None:
    result = client.request("POST", f"/halts/{halt_id}/resume", json={"by": f"cli:{_user()}"})
    print(f"Resumed halt {result['halt']['id']} ({result['restored_grants']} grant(s) restored).", file=out)


def _user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _client() -> Client:
    ctx: click.Context | None = click.get_current_context()
    while ctx is not None and ctx.command is not approvals:
        ctx = ctx.parent
    return connect(ctx.params.get("url") if ctx is not None else None, runtime().env)


def _call(action: Callable[[Client, TextIO], None]) -> int:
    """Run one action against the mesh; a refusal or an unreachable mesh is one line on stderr (naming the fix
    when it is a credential), exit 1."""
    with _client() as client:
        try:
            action(client, runtime().out)
        except MeshError as e:
            raise Fail(refusal(e, client, runtime().env)) from None
    return 0


_ID = click.argument("approval_id", metavar="ID")
_REASON = click.option("--reason", "-r", default="", help="reasoning recorded with the decision")


@click.group("approvals", cls=LazyGroup, context_settings=CONTEXT)
@click.option("--url", default=None, help=f"the mesh (default: $MESH_URL, else {DEFAULT_URL})")
def approvals(url: str | None) -> None:
    """Review and resolve the mesh's approvals; emergency stop. The token is $MESH_ADMIN_TOKEN, else the one a
    local server generated (its token file)."""


@approvals.command("pending", context_settings=CONTEXT)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0,
    metavar="SECONDS",
    help="wait up to SECONDS for an approval to be pending (exit 1 if none comes)",
)
def pending(wait: float) -> int:
    """List pending approvals."""
    return _call(lambda c, out: _pending(c, out, wait))


@approvals.command("show", context_settings=CONTEXT)
@_ID
def show(approval_id: str) -> int:
    """Show one approval in full.

    ID is an id or a unique prefix. Shows the call, the grants in force and the agent's recent calls."""
    return _call(lambda c, out: _show(c, approval_id, out))


@approvals.command("approve", context_settings=CONTEXT)
@_ID
@_REASON
def approve(approval_id: str, reason: str) -> int:
    """Approve an approval (id or unique prefix): the held call runs."""
    return _call(lambda c, out: _resolve(c, approval_id, "approve", reason, out))


@approvals.command("deny", context_settings=CONTEXT)
@_ID
@_REASON
def deny(approval_id: str, reason: str) -> int:
    """Deny an approval (id or unique prefix): the held call is refused."""
    return _call(lambda c, out: _resolve(c, approval_id, "deny", reason, out))


@approvals.command("watch", context_settings=CONTEXT)
@click.option(
    "--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True, help="seconds between polls"
)
def watch(interval: float) -> int:
    """Follow the queue as approvals arrive and are resolved.

    Prints one line per event until Ctrl-C."""
    return _call(lambda c, out: _watch(c, interval, out))


@approvals.command("halt", context_settings=CONTEXT)
@click.option("--agent", default=None, help="stop this agent id or glob")
@click.option("--session", default=None, help="stop this session id")
@click.option("--all", "all_", is_flag=True, help="stop every agent")
@click.option("--reason", default="", help="recorded with the stop")
def halt(agent: str | None, session: str | None, all_: bool, reason: str) -> int:
    """Emergency stop for an agent, a session or everyone.

    Every call is refused until the stop is resumed (mesh resume ID)."""
    if sum(bool(x) for x in (agent, session, all_)) != 1:
        raise UsageFail("give exactly one of --agent, --session or --all")
    args = namespace(agent=agent, session=session, all=all_, reason=reason)
    return _call(lambda c, out: _halt(c, args, out))


@approvals.command("halts", context_settings=CONTEXT)
def halts() -> int:
    """List the stops in force."""
    return _call(_halts)


@approvals.command("resume", context_settings=CONTEXT)
@click.argument("halt_id", metavar="ID")
def resume(halt_id: str) -> int:
    """End a stop (id or unique prefix)."""
    return _call(lambda c, out: _resume(c, halt_id, out))


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    return run(approvals, argv, prog="mesh", out=out, err=err)


if __name__ == "__main__":
    sys.exit(main())
