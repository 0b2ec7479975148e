"""`mesh`: the approval CLI (CONTRACT 1.1). Standard library only, so it runs wherever Python does.

    mesh pending | show <id> | approve <id> | deny <id> | watch
    mesh halt --agent <glob> | --session <id> | --all [--reason R] | halts | resume <id>

Env: MESH_URL (default http://localhost:9090), MESH_ADMIN_TOKEN. Without a token, a loopback MESH_URL gets the
server's generated one from its file (FLUX7_ADMIN_TOKEN_FILE, FLUX7_CONFIG's data directory, else
./flux7-admin.token; shared/admin_token.py). Resolutions are signed `cli:$USER`."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["Client", "MeshError", "main"]

DEFAULT_URL = "http://localhost:9090"


class MeshError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, url: str, token: str = "", timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = str(json.loads(raw).get("error") or raw.decode(errors="replace"))
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace").strip() or e.reason
            raise MeshError(e.code, message) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise MeshError(0, f"cannot reach the mesh at {self.url}: {reason}") from None
        return json.loads(raw) if raw else None


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


def _pending(client: Client, out: TextIO) -> None:
    items = client.call("GET", "/approvals?status=pending")
    if not items:
        print("No pending approvals.", file=out)
        return
    _table(_approval_rows(items), _APPROVAL_HEADERS, out)


def _show(client: Client, approval_id: str, out: TextIO) -> None:
    a = client.call("GET", f"/approvals/{approval_id}")
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
    body: dict[str, Any] = {"resolved_by": f"cli:{_user()}"}
    if reason:
        body["reasoning"] = reason
    result = client.call("POST", f"/approvals/{approval_id}/{decision}", body)
    print(f"{result['id']} {result['status']}", file=out)


def _watch(client: Client, interval: float, out: TextIO, rounds: int | None = None) -> None:
    """Print each approval as it arrives and as it leaves the queue, until interrupted."""
    seen: dict[str, dict[str, Any]] = {}
    print(f"Watching {client.url} for approvals (Ctrl-C to stop)…", file=out, flush=True)
    n = 0
    while rounds is None or n < rounds:
        n += 1
        current = {a["id"]: a for a in client.call("GET", "/approvals?status=pending")}
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
            gone = client.call("GET", f"/approvals/{approval_id}")
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
    result = client.call("POST", "/halts", body)
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
    items = client.call("GET", "/halts")
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
    result = client.call("POST", f"/halts/{halt_id}/resume", {"by": f"cli:{_user()}"})
    print(f"Resumed halt {result['halt']['id']} ({result['restored_grants']} grant(s) restored).", file=out)


def _user() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mesh", description="Review and resolve flux7 mesh approvals; emergency stop.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("pending", help="list pending approvals")
    for name in ("show", "approve", "deny"):
        s = sub.add_parser(name, help=f"{name} an approval (id or unique prefix)")
        s.add_argument("id")
        if name != "show":
            s.add_argument("--reason", "-r", default="", help="reasoning recorded with the decision")
    w = sub.add_parser("watch", help="follow the queue")
    w.add_argument("--interval", type=float, default=2.0)
    h = sub.add_parser("halt", help="emergency stop")
    group = h.add_mutually_exclusive_group(required=True)
    group.add_argument("--agent", help="agent id or glob")
    group.add_argument("--session", help="session id")
    group.add_argument("--all", action="store_true", help="every agent")
    h.add_argument("--reason", default="")
    sub.add_parser("halts", help="list the stops in force")
    r = sub.add_parser("resume", help="end a stop (id or unique prefix)")
    r.add_argument("id")
    return p


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    from .admin_token import cli_admin_token

    url = os.environ.get("MESH_URL") or DEFAULT_URL
    client = Client(url, cli_admin_token(url, os.environ))
    try:
        if args.command == "pending":
            _pending(client, out)
        elif args.command == "show":
            _show(client, args.id, out)
        elif args.command in ("approve", "deny"):
            _resolve(client, args.id, args.command, args.reason, out)
        elif args.command == "watch":
            _watch(client, args.interval, out)
        elif args.command == "halt":
            _halt(client, args, out)
        elif args.command == "halts":
            _halts(client, out)
        elif args.command == "resume":
            _resume(client, args.id, out)
    except MeshError as e:
        print(f"mesh: {e}" + (f" (HTTP {e.status})" if e.status else ""), file=err)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
