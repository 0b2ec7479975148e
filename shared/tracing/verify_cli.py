"""`mesh7 trace verify [--json] files…`: exit 0 when the chain holds, 1 at a break, 2 on usage/I/O errors and
for a file that is not a trace file (missing, a directory, an SQLite database, not JSONL, no chained line).
Calls whose outcome was never written (an intent line with status_code 0 and no later revision) are listed as
OUTCOME UNKNOWN; they do not break the chain."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TextIO

import click

from flux7.shared.cli.kit import CONTEXT, LazyGroup, run, runtime
from flux7.shared.tracing.chain import verify_files

__all__ = ["main", "trace", "verify"]

USAGE = "usage: {prog} [--json] [--key-env NAME] <file>... (oldest first, e.g. traces.jsonl.old traces.jsonl)"


@click.group("trace", cls=LazyGroup, context_settings=CONTEXT)
def trace() -> None:
    """The audit trail's hash chain."""


@trace.command("verify", context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--key-env", default="MESH_TRACE_KEY", show_default=True, help="the variable holding the HMAC key")
@click.argument("files", nargs=-1)
@click.pass_context
def verify(ctx: click.Context, as_json: bool, key_env: str, files: tuple[str, ...]) -> int:
    """Check the hash chain of JSONL trace FILES (oldest first). Exit 0 when it holds, 1 at a break, 2 when a
    file is missing or is not a trace file."""
    rt = runtime()
    return verify_files_command(ctx.command_path, list(files), as_json, key_env, rt.env, rt.out, rt.err)


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """argv: the arguments after `mesh7 trace verify`. The HMAC key is MESH_TRACE_KEY's (or --key-env's)."""
    return run(verify, argv, prog="mesh7 trace verify", env=env, out=out, err=err)


def verify_files_command(
    prog: str, files: list[str], as_json: bool, key_env: str, env: Mapping[str, str], out: TextIO, err: TextIO
) -> int:
    if not files:
        print(f"{prog}: no file given\n{USAGE.format(prog=prog)}", file=err)
        return 2
    key = env.get(key_env, "").encode() or None
    try:
        for file in files:
            refused = _not_a_trace_file(file)
            if refused:
                print(f"{prog}: {file}: {refused}", file=err)
                return 2
        v = verify_files(files, key)
    except OSError as e:
        print(f"{prog}: {e.filename or ''}: {e.strerror or e}", file=err)
        return 2
    if v.brk is None and not v.chained:
        # Nothing sealed to vouch for: an "OK" here would be about nothing (or about the wrong file).
        print(
            f"{prog}: {', '.join(files)}: no chained trace lines "
            f"({v.lines} lines); not a flux7 trace file, or written before the chain",
            file=err,
        )
        return 2
    report = v.report()
    unknown = sorted(v.pending.values(), key=lambda c: int(c["seq"]))
    if unknown:
        # Not a break: calls whose intent was written and whose outcome never was (in flight, or the server
        # stopped during the call).
        report["outcome_unknown"] = len(unknown)
        report["outcome_unknown_calls"] = unknown
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False), file=out)
    else:
        print(f"lines {v.lines} · chained {v.chained} · unchained (before the chain) {v.unchained}", file=out)
        if v.chained:
            print(f"seq {v.first_seq} → {v.last_seq} · alg {v.alg}\nhead {v.head}", file=out)
            if v.anchor:
                print(f"anchor {v.anchor} (last hash of the previous file)", file=out)
        if v.brk is not None:
            b = v.brk
            print(f"BROKEN {b['file']}:{b['line']} seq {b.get('seq', 0)}: {b['reason']}", file=out)
        elif v.chained:
            print("OK", file=out)
        for c in unknown:
            print(
                f"OUTCOME UNKNOWN {c['file']}:{c['line']} seq {c['seq']} trace {c['trace_id']} "
                f"{c['agent_id']} {c['tool']} at {c['timestamp']}",
                file=out,
            )
    return 1 if v.brk is not None else 0


def _not_a_trace_file(path: str) -> str:
    """Why the file at `path` is not a JSONL trace file (its first bytes), or "" when it may be one.
    Raises OSError (missing, a directory, unreadable)."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"SQLite format 3\x00"):
        return "an SQLite database, not a JSONL trace file (a server without trace_file: GET /traces/verify)"
    first = head.lstrip(b" \t\r\n")[:1]
    if first and first != b"{":
        return "not a JSONL trace file (the first line is not a JSON object)"
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
