from __future__ import annotations

import io
import json
from pathlib import Path

from flux7.shared.store.db import Database
from flux7.shared.tracing import TraceEntry, Tracer
from flux7.shared.tracing.verify_cli import main

from .conftest import make_settings


def _run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=env or {}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _write(tmp_path: Path, db: Database, n: int, key: str = "") -> Path:
    tracer = Tracer(make_settings(tmp_path, **({"trace_key": key} if key else {})), db)
    for i in range(n):
        tracer.record(TraceEntry(agent_id="a", tool="t", params={"i": i}, policy="allow", status_code=200))
    return tmp_path / "traces.jsonl"


def test_an_intact_chain_exits_0_and_says_ok(tmp_path: Path, db: Database) -> None:
    path = _write(tmp_path, db, 3)
    code, out, _ = _run(str(path))
    assert code == 0
    assert out.splitlines()[0] == "lines 3 · chained 3 · unchained (before the chain) 0"
    assert out.splitlines()[1] == "seq 1 → 3 · alg sha256" and out.rstrip().endswith("OK")


def test_a_break_exits_1_and_the_json_report_names_file_and_line(tmp_path: Path, db: Database) -> None:
    path = _write(tmp_path, db, 3)
    lines = path.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"i":1', b'"i":5')
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, out, _ = _run("--json", str(path))
    assert code == 1
    report = json.loads(out)
    assert report["break"] == {
        "file": str(path),
        "line": 2,
        "seq": 2,
        "reason": "hash does not match the content",
    }
    assert (report["lines"], report["chained"], report["first_seq"], report["last_seq"]) == (2, 1, 1, 1)
    code, out, _ = _run(str(path))
    assert code == 1 and f"BROKEN {path}:2 seq 2: hash does not match the content" in out


def test_the_key_comes_from_mesh_trace_key(tmp_path: Path, db: Database) -> None:
    path = _write(tmp_path, db, 2, key="k1")
    assert _run(str(path), env={"MESH_TRACE_KEY": "k1"})[0] == 0
    assert _run(str(path), env={"MESH_TRACE_KEY": "k2"})[0] == 1
    assert _run(str(path))[0] == 1  # an HMAC line with no key to check it
    assert _run("--key-env", "MY_KEY", str(path), env={"MY_KEY": "k1"})[0] == 0


def test_usage_and_io_errors_exit_2(tmp_path: Path) -> None:
    code, _, err = _run()
    assert code == 2 and "no file given" in err
    assert _run("--bogus", "x")[0] == 2
    code, _, err = _run(str(tmp_path / "missing.jsonl"))
    assert code == 2 and "missing.jsonl" in err
