"""`flux7 governance …`: the governance engine of a running server, over its control plane (MESH_URL, default
http://localhost:9090; the admin token as for `flux7 approval`: MESH_ADMIN_TOKEN, else the local server's).

    flux7 governance catalog                          declared agents (state, owner) and discovered ones
    flux7 governance catalog-put NAME FILE            write catalog_dir/NAME.yaml from FILE (validated, reloaded)
    flux7 governance lifecycle ENTRY STATE --reason R move an entry: proposed|active|suspended|retired
    flux7 governance evaluate                         fold in new traces and score every agent now
    flux7 governance scores | verdicts                the latest scores / verdicts of every agent
    flux7 governance agent AGENT                      one agent: scores over time, findings, evidence
    flux7 governance findings [--severity S]          open findings
    flux7 governance graph [--days N]                 the dependency graph (JSON)
    flux7 governance impact upstream|tool|agent NAME  what breaks, with counts over the last 30 days
    flux7 governance diff policy|catalog|tool NAME [--old N] [--new N]
    flux7 governance pin-diff TOOL                    a changed pinned tool's exact definition diff
    flux7 governance draft NAME FILE... [--remove F]  save a proposed policy set (files by their names)
    flux7 governance replay (--draft NAME | FILE...) [--days N]
    flux7 governance apply NAME                       write a draft's files (validated, reloaded)

Every command takes --json (print the server's JSON) and --url."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["main"]

DEFAULT_URL = "http://localhost:9090"


class _Failed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Mesh:
    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        if query:
            path += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = str(json.loads(raw).get("error") or raw.decode(errors="replace"))
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace").strip() or str(e.reason)
            raise _Failed(e.code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise _Failed(0, f"cannot reach the mesh at {self.url}: {getattr(e, 'reason', e)}") from None
        return json.loads(raw) if raw else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flux7 governance", description="The agent catalog, scores, graph, diffs, replay.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the server's JSON")
    common.add_argument("--url", default="", help=f"the mesh (default: $MESH_URL or {DEFAULT_URL})")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("catalog", parents=[common], help="declared and discovered agents")
    put = sub.add_parser("catalog-put", parents=[common], help="write a catalog file from a local file")
    put.add_argument("name")
    put.add_argument("file")
    life = sub.add_parser("lifecycle", parents=[common], help="move a catalog entry through its lifecycle")
    life.add_argument("entry")
    life.add_argument("state", choices=["proposed", "active", "suspended", "retired"])
    life.add_argument("--reason", required=True, help="why (recorded)")
    life.add_argument("--by", default="", help="who (default: cli:$USER)")
    sub.add_parser("evaluate", parents=[common], help="score every agent now")
    sub.add_parser("scores", parents=[common], help="the latest scores")
    sub.add_parser("verdicts", parents=[common], help="the latest verdicts")
    agent = sub.add_parser("agent", parents=[common], help="one agent in detail")
    agent.add_argument("agent")
    found = sub.add_parser("findings", parents=[common], help="open findings")
    found.add_argument("--severity", default="", choices=["", "info", "low", "medium", "high", "critical"])
    graph = sub.add_parser("graph", parents=[common], help="the dependency graph (JSON)")
    graph.add_argument("--days", type=int, default=30)
    impact = sub.add_parser("impact", parents=[common], help="what breaks if X goes away or changes")
    impact.add_argument("kind", choices=["upstream", "tool", "agent"])
    impact.add_argument("name")
    impact.add_argument("--days", type=int, default=30)
    diff = sub.add_parser("diff", parents=[common], help="classified changes between two versions")
    diff.add_argument("kind", choices=["policy", "catalog", "tool"])
    diff.add_argument("name")
    diff.add_argument("--old", type=int, default=None)
    diff.add_argument("--new", type=int, default=None)
    pin = sub.add_parser("pin-diff", parents=[common], help="a pinned tool against its current definition")
    pin.add_argument("tool")
    draft = sub.add_parser("draft", parents=[common], help="save a proposed policy set")
    draft.add_argument("name")
    draft.add_argument("files", nargs="*", help="policy files (each replaces the file of the same name)")
    draft.add_argument("--remove", action="append", default=[], help="a policy file the draft removes")
    replay = sub.add_parser("replay", parents=[common], help="re-decide past traced calls with a proposed set")
    replay.add_argument("files", nargs="*", help="policy files (each replaces the file of the same name)")
    replay.add_argument("--draft", default="")
    replay.add_argument("--days", type=float, default=7)
    apply = sub.add_parser("apply", parents=[common], help="write a draft's files")
    apply.add_argument("name")
    return p


def _read_files(paths: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in paths:
        path = Path(name)
        try:
            out[path.name] = path.read_text()
        except OSError as e:
            raise _Failed(0, f"{name}: {e.strerror or e}") from None
    return out


def _table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    for line in [headers, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip(), file=out)


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _run(mesh: _Mesh, a: argparse.Namespace, out: TextIO) -> None:
    c = a.command
    result: Any
    if c == "catalog":
        result = mesh.call("GET", "/governance/catalog")
        if not a.json:
            rows = [
                [e["id"], e["state"], e["owner"] or "-", e["team"] or "-", ",".join(e["tools"])]
                for e in result["agents"]
            ]
            rows += [[d["id"], "discovered", "-", "-", "(not declared)"] for d in result["discovered"]]
            _table(rows, ["AGENT", "STATE", "OWNER", "TEAM", "TOOLS"], out)
            if result.get("error"):
                print(f"catalog error (last good catalog kept): {result['error']}", file=out)
            return
    elif c == "catalog-put":
        text = _read_files([a.file])[Path(a.file).name]
        result = mesh.call("PUT", f"/governance/catalog/files/{a.name}", {"text": text, "by": _who()})
    elif c == "lifecycle":
        body = {"state": a.state, "reason": a.reason, "by": a.by or _who()}
        result = mesh.call("POST", f"/governance/catalog/{urllib.parse.quote(a.entry, safe='')}/lifecycle", body)
        if not a.json:
            print(
                f"{result['id']}: {result['from']} -> {result['state']} (by {result['by']}: {result['reason']})",
                file=out,
            )
            return
    elif c in ("evaluate", "scores", "verdicts"):
        result = (
            mesh.call("POST", "/governance/evaluate") if c == "evaluate" else mesh.call("GET", "/governance/scores")
        )
        if not a.json:
            rows = []
            for s in result:
                scores = s.get("scores", s)
                rows.append(
                    [
                        s["agent"],
                        s["state"],
                        str(scores["capability"]),
                        str(scores["behaviour"]),
                        str(scores["hygiene"]),
                        s["verdict"],
                    ]
                )
            _table(rows, ["AGENT", "STATE", "CAPABILITY", "BEHAVIOUR", "HYGIENE", "VERDICT"], out)
            return
    elif c == "agent":
        result = mesh.call("GET", f"/governance/agents/{urllib.parse.quote(a.agent, safe='')}")
        if not a.json:
            s = result["scores"] or {}
            print(f"{result['agent']}  state={result['state']}  verdict={result['verdict'] or '-'}", file=out)
            print(
                f"scores: capability={s.get('capability')} behaviour={s.get('behaviour')} hygiene={s.get('hygiene')}",
                file=out,
            )
            for f in result["findings"]:
                print(f"  [{f['severity']}] {f['rule']}: {f['message']} (seen {f['occurrences']}x)", file=out)
                if f["remediation"]:
                    print(f"      fix: {f['remediation']}", file=out)
                if f["evidence"]:
                    print(f"      traces: {', '.join(f['evidence'])}", file=out)
            trend = " ".join(f"{h['behaviour']}" for h in result["history"][-10:])
            print(f"behaviour over time: {trend}", file=out)
            return
    elif c == "findings":
        result = mesh.call("GET", "/governance/findings", query={"severity": a.severity})
        if not a.json:
            rows = [[f["agent"], f["severity"], f["rule"], str(f["occurrences"]), f["remediation"]] for f in result]
            _table(rows, ["AGENT", "SEVERITY", "RULE", "SEEN", "REMEDIATION"], out)
            return
    elif c == "graph":
        result = mesh.call("GET", "/governance/graph", query={"days": a.days})
    elif c == "impact":
        result = mesh.call("GET", "/governance/impact", query={"kind": a.kind, "name": a.name, "days": a.days})
        if not a.json:
            print(
                f"{a.kind} {a.name}: {result['calls']} calls in {result['sessions']} sessions, "
                f"last {result['days']} days",
                file=out,
            )
            _table(
                [[x["agent"], str(x["calls"]), str(x["sessions"])] for x in result["agents"]],
                ["AGENT", "CALLS", "SESSIONS"],
                out,
            )
            return
    elif c == "diff":
        result = mesh.call(
            "GET", "/governance/diff", query={"kind": a.kind, "name": a.name, "old": a.old, "new": a.new}
        )
    elif c == "pin-diff":
        result = mesh.call("GET", f"/governance/pins/{urllib.parse.quote(a.tool, safe='')}/diff")
    elif c == "draft":
        files = _read_files(a.files)
        files.update({(n if n.endswith(".yaml") else f"{n}.yaml"): None for n in a.remove})
        result = mesh.call("PUT", f"/governance/drafts/{a.name}", {"files": files, "by": _who()})
    elif c == "replay":
        wanted: dict[str, Any] = {"days": a.days}
        if a.draft:
            wanted["draft"] = a.draft
        if a.files:
            wanted["files"] = _read_files(a.files)
        result = mesh.call("POST", "/governance/replay", wanted)
        if not a.json:
            print(
                f"replayed {result['calls']} calls of the last {result['days']} days in {result['elapsed_ms']} ms: "
                f"{result['changed']} would change",
                file=out,
            )
            rows = [
                [g["agent"], g["tool"], f"{g['from']} -> {g['to']}", str(g["count"]), ",".join(g["trace_ids"][:2])]
                for g in result["groups"]
            ]
            _table(rows, ["AGENT", "TOOL", "CHANGE", "CALLS", "E.G. TRACES"], out)
            return
    else:  # apply
        result = mesh.call("POST", f"/governance/drafts/{a.name}/apply", {"by": _who()})
    if c in ("diff", "pin-diff") and not a.json:
        for ch in result.get("changes", []):
            agents = ",".join(ch["affected_agents"]) or "-"
            print(f"{ch['class']:<9} {ch['kind']:<28} {ch['subject']}  {ch['detail']}  (agents: {agents})", file=out)
        if result.get("text_diff"):
            print(result["text_diff"], file=out, end="")
        elif result.get("error"):
            print(result["error"], file=out)
        return
    print(json.dumps(result, indent=2), file=out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = _parser().parse_args(argv)
    from flux7.shared.auth.admin_token import cli_admin_token

    url = args.url or os.environ.get("MESH_URL") or DEFAULT_URL
    try:
        _run(_Mesh(url, cli_admin_token(url, os.environ)), args, out)
    except _Failed as e:
        print(f"mesh: {e}" + (f" (HTTP {e.status})" if e.status else ""), file=err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
