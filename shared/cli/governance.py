"""`flux7 governance …`: the governance engine of a running server, over its control plane (`--url`, else MESH_URL,
else http://localhost:9090; the admin token as for `flux7 approvals`: MESH_ADMIN_TOKEN, else a local server's
token file, found through the config every command finds).

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

import getpass
import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import click

from flux7.shared.cli.control_plane import DEFAULT_URL, Client, MeshError, connect, refusal
from flux7.shared.cli.kit import CONTEXT, Fail, LazyGroup, run, runtime

__all__ = ["governance", "main"]


def _read_files(paths: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in paths:
        path = Path(name)
        try:
            out[path.name] = path.read_text()
        except OSError as e:
            raise Fail(f"{name}: {e.strerror or e}") from None
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


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _call(url: str | None, as_json: bool, action: Callable[[Client], Any], show: Callable[[Any, TextIO], None]) -> int:
    """Ask the server; print its JSON with --json, else `show` it. A refusal or an unreachable server is one line
    on stderr that names the fix for a missing credential; exit 1."""
    env = runtime().env
    with connect(url, env, timeout=120) as client:
        try:
            result = action(client)
        except MeshError as e:
            raise Fail(refusal(e, client, env)) from None
    out = runtime().out
    if as_json:
        print(json.dumps(result, indent=2), file=out)
    else:
        show(result, out)
    return 0


def _print_json(result: Any, out: TextIO) -> None:
    print(json.dumps(result, indent=2), file=out)


def _common(f: Any) -> Any:
    f = click.option("--url", default=None, help=f"the mesh (default: $MESH_URL, else {DEFAULT_URL})")(f)
    return click.option("--json", "as_json", is_flag=True, help="print the server's JSON")(f)


@click.group("governance", cls=LazyGroup, context_settings=CONTEXT)
def governance() -> None:
    """The agent catalog, scores and verdicts, the dependency graph, diffs and policy replay of a running server
    (docs/governance.md). The server is --url, else $MESH_URL, else http://localhost:9090; the admin token is
    $MESH_ADMIN_TOKEN, else the one a local server generated (found as `mesh` finds it)."""


@governance.command("catalog", context_settings=CONTEXT)
@_common
def catalog(url: str | None, as_json: bool) -> int:
    """Declared agents (state, owner, team, tools) and the ones only seen in traffic."""

    def show(result: Any, out: TextIO) -> None:
        rows = [
            [e["id"], e["state"], e["owner"] or "-", e["team"] or "-", ",".join(e["tools"])] for e in result["agents"]
        ]
        rows += [[d["id"], "discovered", "-", "-", "(not declared)"] for d in result["discovered"]]
        _table(rows, ["AGENT", "STATE", "OWNER", "TEAM", "TOOLS"], out)
        if result.get("error"):
            print(f"catalog error (last good catalog kept): {result['error']}", file=out)

    return _call(url, as_json, lambda c: c.request("GET", "/governance/catalog"), show)


@governance.command("catalog-put", context_settings=CONTEXT)
@click.argument("name")
@click.argument("file")
@_common
def catalog_put(name: str, file: str, url: str | None, as_json: bool) -> int:
    """Write catalog_dir/NAME.yaml from FILE (validated, then reloaded); a new entry starts as proposed."""
    text = _read_files([file])[Path(file).name]
    body = {"text": text, "by": _who()}
    return _call(url, as_json, lambda c: c.request("PUT", f"/governance/catalog/files/{name}", json=body), _print_json)


@governance.command("lifecycle", context_settings=CONTEXT)
@click.argument("entry")
@click.argument("state", type=click.Choice(["proposed", "active", "suspended", "retired"]))
@click.option("--reason", required=True, help="why (recorded)")
@click.option("--by", default="", help="who (default: cli:$USER)")
@_common
def lifecycle(entry: str, state: str, reason: str, by: str, url: str | None, as_json: bool) -> int:
    """Move a catalog entry through its lifecycle (proposed, active, suspended, retired)."""
    body = {"state": state, "reason": reason, "by": by or _who()}

    def show(r: Any, out: TextIO) -> None:
        print(f"{r['id']}: {r['from']} -> {r['state']} (by {r['by']}: {r['reason']})", file=out)

    return _call(
        url, as_json, lambda c: c.request("POST", f"/governance/catalog/{_quote(entry)}/lifecycle", json=body), show
    )


def _scores_table(result: Any, out: TextIO) -> None:
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


@governance.command("evaluate", context_settings=CONTEXT)
@_common
def evaluate(url: str | None, as_json: bool) -> int:
    """Fold in new traces and score every agent now."""
    return _call(url, as_json, lambda c: c.request("POST", "/governance/evaluate"), _scores_table)


@governance.command("scores", context_settings=CONTEXT)
@_common
def scores(url: str | None, as_json: bool) -> int:
    """The latest scores of every agent."""
    return _call(url, as_json, lambda c: c.request("GET", "/governance/scores"), _scores_table)


@governance.command("verdicts", context_settings=CONTEXT)
@_common
def verdicts(url: str | None, as_json: bool) -> int:
    """The latest verdicts of every agent."""
    return _call(url, as_json, lambda c: c.request("GET", "/governance/scores"), _scores_table)


@governance.command("agent", context_settings=CONTEXT)
@click.argument("agent")
@_common
def agent(agent: str, url: str | None, as_json: bool) -> int:
    """One agent in detail: scores over time, findings with their fixes and evidence."""

    def show(result: Any, out: TextIO) -> None:
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

    return _call(url, as_json, lambda c: c.request("GET", f"/governance/agents/{_quote(agent)}"), show)


@governance.command("findings", context_settings=CONTEXT)
@click.option(
    "--severity", default="", type=click.Choice(["", "info", "low", "medium", "high", "critical"]), help="only these"
)
@_common
def findings(severity: str, url: str | None, as_json: bool) -> int:
    """Open findings of every agent."""

    def show(result: Any, out: TextIO) -> None:
        rows = [[f["agent"], f["severity"], f["rule"], str(f["occurrences"]), f["remediation"]] for f in result]
        _table(rows, ["AGENT", "SEVERITY", "RULE", "SEEN", "REMEDIATION"], out)

    return _call(url, as_json, lambda c: c.request("GET", "/governance/findings", params={"severity": severity}), show)


@governance.command("graph", context_settings=CONTEXT)
@click.option("--days", type=int, default=30, show_default=True, help="the traffic window")
@_common
def graph(days: int, url: str | None, as_json: bool) -> int:
    """The dependency graph: agents, tools, upstreams (JSON)."""
    return _call(url, as_json, lambda c: c.request("GET", "/governance/graph", params={"days": days}), _print_json)


@governance.command("impact", context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(["upstream", "tool", "agent"]))
@click.argument("name")
@click.option("--days", type=int, default=30, show_default=True, help="the traffic window")
@_common
def impact(kind: str, name: str, days: int, url: str | None, as_json: bool) -> int:
    """What breaks if an upstream, a tool or an agent goes away or changes, with counts."""

    def show(result: Any, out: TextIO) -> None:
        print(
            f"{kind} {name}: {result['calls']} calls in {result['sessions']} sessions, last {result['days']} days",
            file=out,
        )
        rows = [[x["agent"], str(x["calls"]), str(x["sessions"])] for x in result["agents"]]
        _table(rows, ["AGENT", "CALLS", "SESSIONS"], out)

    query = {"kind": kind, "name": name, "days": days}
    return _call(url, as_json, lambda c: c.request("GET", "/governance/impact", params=query), show)


def _changes(result: Any, out: TextIO) -> None:
    for ch in result.get("changes", []):
        agents = ",".join(ch["affected_agents"]) or "-"
        print(f"{ch['class']:<9} {ch['kind']:<28} {ch['subject']}  {ch['detail']}  (agents: {agents})", file=out)
    if result.get("text_diff"):
        print(result["text_diff"], file=out, end="")
    elif result.get("error"):
        print(result["error"], file=out)


@governance.command("diff", context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(["policy", "catalog", "tool"]))
@click.argument("name")
@click.option("--old", type=int, default=None, help="the older version (default: the one before --new)")
@click.option("--new", type=int, default=None, help="the newer version (default: the current one)")
@_common
def diff(kind: str, name: str, old: int | None, new: int | None, url: str | None, as_json: bool) -> int:
    """Classified changes between two versions of a policy file, a catalog file or a tool."""
    query = {"kind": kind, "name": name, "old": old, "new": new}
    return _call(url, as_json, lambda c: c.request("GET", "/governance/diff", params=query), _changes)


@governance.command("pin-diff", context_settings=CONTEXT)
@click.argument("tool")
@_common
def pin_diff(tool: str, url: str | None, as_json: bool) -> int:
    """A pinned tool's definition against its current one, exactly."""
    return _call(url, as_json, lambda c: c.request("GET", f"/governance/pins/{_quote(tool)}/diff"), _changes)


@governance.command("draft", context_settings=CONTEXT)
@click.argument("name")
@click.argument("files", nargs=-1)
@click.option("--remove", multiple=True, metavar="FILE", help="a policy file the draft removes (repeat)")
@_common
def draft(name: str, files: tuple[str, ...], remove: tuple[str, ...], url: str | None, as_json: bool) -> int:
    """Save a proposed policy set: each FILE replaces the policy file of the same name."""
    proposed = _read_files(files)
    proposed.update({(n if n.endswith(".yaml") else f"{n}.yaml"): None for n in remove})
    body = {"files": proposed, "by": _who()}
    return _call(url, as_json, lambda c: c.request("PUT", f"/governance/drafts/{name}", json=body), _print_json)


@governance.command("replay", context_settings=CONTEXT)
@click.argument("files", nargs=-1)
@click.option("--draft", "draft_name", default="", help="a saved draft instead of files")
@click.option("--days", type=float, default=7, show_default=True, help="how far back to replay")
@_common
def replay(files: tuple[str, ...], draft_name: str, days: float, url: str | None, as_json: bool) -> int:
    """Re-decide past traced calls with a proposed policy set (FILE… or --draft NAME): what would change."""
    wanted: dict[str, Any] = {"days": days}
    if draft_name:
        wanted["draft"] = draft_name
    if files:
        wanted["files"] = _read_files(files)

    def show(result: Any, out: TextIO) -> None:
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

    return _call(url, as_json, lambda c: c.request("POST", "/governance/replay", json=wanted), show)


@governance.command("apply", context_settings=CONTEXT)
@click.argument("name")
@_common
def apply(name: str, url: str | None, as_json: bool) -> int:
    """Write a draft's files into policy_dir (validated, then reloaded)."""
    body = {"by": _who()}
    return _call(url, as_json, lambda c: c.request("POST", f"/governance/drafts/{name}/apply", json=body), _print_json)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    return run(governance, argv, prog="flux7 governance", env=env)


if __name__ == "__main__":
    raise SystemExit(main())
