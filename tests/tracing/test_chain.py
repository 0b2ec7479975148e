from __future__ import annotations

import hashlib
import hmac
import json
import multiprocessing
from pathlib import Path

import pytest

from flux7.shared.store.db import Database
from flux7.shared.tracing import TraceEntry, Tracer, verify_files
from flux7.shared.tracing.chain import split_line

from . import workers
from .conftest import make_settings


def _record(tracer: Tracer, n: int, **fields: object) -> list[TraceEntry]:
    return [
        tracer.record(TraceEntry(agent_id="a", tool="t", params={"i": i}, policy="allow", **fields))  # type: ignore[arg-type]
        for i in range(n)
    ]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_each_line_is_the_entry_then_an_envelope_hashing_seq_alg_prev_and_the_bytes(
    tmp_path: Path, tracer: Tracer
) -> None:
    _record(tracer, 2)
    first, second = _lines(tmp_path / "traces.jsonl")
    payload, env = split_line(second)  # type: ignore[misc]
    assert env.seq == 2 and env.alg == "sha256"
    assert env.prev_hash == json.loads(first)["hash"]
    want = hashlib.sha256(f"2\nsha256\n{env.prev_hash}\n".encode() + payload).hexdigest()
    assert env.hash == want
    assert second == payload[:-1] + f',"seq":2,"alg":"sha256","prev_hash":"{env.prev_hash}","hash":"{want}"}}'.encode()
    assert json.loads(first)["prev_hash"] == ""


def test_an_edited_line_is_reported_at_that_line(tmp_path: Path, tracer: Tracer) -> None:
    _record(tracer, 5)
    path = tmp_path / "traces.jsonl"
    lines = _lines(path)
    lines[2] = lines[2].replace(b'"i":2', b'"i":7')
    path.write_bytes(b"\n".join(lines) + b"\n")
    v = verify_files([path], None)
    assert v.brk == {"file": str(path), "line": 3, "seq": 3, "reason": "hash does not match the content"}
    assert v.chained == 2


def test_a_deleted_line_breaks_the_chain_at_the_next_one(tmp_path: Path, tracer: Tracer) -> None:
    _record(tracer, 4)
    path = tmp_path / "traces.jsonl"
    lines = _lines(path)
    del lines[1]
    path.write_bytes(b"\n".join(lines) + b"\n")
    v = verify_files([path], None)
    assert v.brk is not None and v.brk["line"] == 2 and v.brk["reason"] == "seq 3 follows 1"


def test_params_holding_a_seq_key_do_not_confuse_the_split(tmp_path: Path, tracer: Tracer) -> None:
    tracer.record(TraceEntry(agent_id="a", tool="t", policy="allow", params={"note": ',"seq":99,"alg":"x"', "seq": 5}))
    v = verify_files([tmp_path / "traces.jsonl"], None)
    assert v.brk is None and v.chained == 1 and v.last_seq == 1


def test_with_a_key_lines_are_hmac_and_need_that_key(tmp_path: Path, db: Database) -> None:
    tracer = Tracer(make_settings(tmp_path, trace_key="s3cret"), db)
    _record(tracer, 3)
    path = tmp_path / "traces.jsonl"
    payload, env = split_line(_lines(path)[0])  # type: ignore[misc]
    assert env.alg == "hmac-sha256"
    assert env.hash == hmac.new(b"s3cret", b"1\nhmac-sha256\n\n" + payload, hashlib.sha256).hexdigest()
    assert verify_files([path], b"s3cret").brk is None
    wrong = verify_files([path], b"other")
    assert wrong.brk is not None and wrong.brk["reason"] == "hash does not match the content"
    keyless = verify_files([path], None)
    assert keyless.brk is not None and "no key" in keyless.brk["reason"]
    report = tracer.verify()
    assert report["hmac"] is True and report["alg"] == "hmac-sha256" and "break" not in report


def test_a_plain_chain_checked_with_a_key_is_a_downgrade(tmp_path: Path, tracer: Tracer) -> None:
    _record(tracer, 1)
    v = verify_files([tmp_path / "traces.jsonl"], b"key")
    assert v.brk is not None and v.brk["reason"] == "alg sha256 where hmac-sha256 is required"


def test_lines_before_the_chain_are_unchained_and_inside_it_a_break(tmp_path: Path, db: Database) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text('{"trace_id":"old1","tool":"t"}\n{"trace_id":"old2","tool":"t"}\n')
    tracer = Tracer(make_settings(tmp_path), db)
    _record(tracer, 2)
    v = verify_files([path], None)
    assert (v.lines, v.unchained, v.chained, v.brk) == (4, 2, 2, None)
    with path.open("a") as f:
        f.write('{"trace_id":"sneaked","tool":"t"}\n')
    _record(tracer, 1)
    v = verify_files([path], None)
    assert v.brk is not None and v.brk["line"] == 5 and v.brk["reason"] == "unchained line inside the chain"


def test_rotation_moves_the_file_to_old_and_keeps_one_chain(tmp_path: Path, db: Database) -> None:
    tracer = Tracer(make_settings(tmp_path), db, max_file_bytes=2000)
    path, old = tmp_path / "traces.jsonl", tmp_path / "traces.jsonl.old"
    written = 0
    while not old.exists():
        written += len(_record(tracer, 1))
        assert written < 50
    assert path.exists() and path.stat().st_size == 0  # the new file exists at once
    written += len(_record(tracer, 2))
    both = verify_files([old, path], None)
    assert both.brk is None and both.last_seq == written
    current = verify_files([path], None)
    assert current.brk is None and current.anchor == json.loads(_lines(old)[-1])["hash"]
    report = tracer.verify()
    assert report["files"] == [str(old), str(path)] and report["last_seq"] == written
    assert "break" not in report


def test_a_writer_follows_a_rotation_done_by_another_writer_and_a_file_moved_by_hand(
    tmp_path: Path, db: Database
) -> None:
    # Each worker process keeps the trace file open between writes; another worker's rotation (or a file moved
    # away by hand) must not leave it appending to the moved file.
    settings = make_settings(tmp_path)
    first, second = Tracer(settings, db, max_file_bytes=2000), Tracer(settings, db, max_file_bytes=2000)
    path, old = tmp_path / "traces.jsonl", tmp_path / "traces.jsonl.old"
    written = len(_record(first, 1))  # `first` now holds the file open
    while not old.exists():
        written += len(_record(second, 1))
        assert written < 50
    written += len(_record(first, 1))
    assert len(_lines(path)) == 1  # the line went to the new file, not after the rotated one
    both = verify_files([old, path], None)
    assert both.brk is None and both.last_seq == written

    path.rename(tmp_path / "moved.jsonl")
    written += len(_record(first, 1))
    assert len(_lines(path)) == 1 and json.loads(_lines(path)[0])["seq"] == written
    assert len(_lines(tmp_path / "moved.jsonl")) == 1  # untouched after the move


def test_seq_carries_across_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    db = Database(tmp_path / "flux7.db")
    _record(Tracer(settings, db), 3)
    db.close()
    db = Database(tmp_path / "flux7.db")
    _record(Tracer(settings, db), 2)
    db.close()
    v = verify_files([tmp_path / "traces.jsonl"], None)
    assert v.brk is None and (v.first_seq, v.last_seq) == (1, 5)


def test_a_file_ahead_of_a_fresh_database_is_continued(tmp_path: Path) -> None:
    first = Database(tmp_path / "one.db")
    _record(Tracer(make_settings(tmp_path, storage_path=str(tmp_path / "one.db")), first), 3)
    first.close()
    second = Database(tmp_path / "two.db")
    tracer = Tracer(make_settings(tmp_path, storage_path=str(tmp_path / "two.db")), second)
    _record(tracer, 1)
    v = verify_files([tmp_path / "traces.jsonl"], None)
    assert v.brk is None and v.last_seq == 4
    second.close()


def test_verify_reports_a_truncated_tail_the_chain_alone_cannot_show(tmp_path: Path, tracer: Tracer) -> None:
    _record(tracer, 4)
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(_lines(path)[:3]) + b"\n")
    assert verify_files([path], None).brk is None
    report = tracer.verify()
    assert report["break"]["line"] == 4 and "head is seq 4" in report["break"]["reason"]


def test_updates_are_appended_revisions_and_the_row_shows_the_newest(tmp_path: Path, tracer: Tracer) -> None:
    [entry] = _record(tracer, 1, policy_rule="p")
    updated = tracer.update(entry.trace_id, approval_status="approved", approved_by="human", latency_ms=40.4)
    assert updated is not None and updated.revision == 1 and updated.latency_ms == 40
    assert tracer.update("no-such-trace", error="x") is None
    lines = [json.loads(x) for x in _lines(tmp_path / "traces.jsonl")]
    assert [x.get("revision", 0) for x in lines] == [0, 1] and lines[1]["approved_by"] == "human"
    got = tracer.get(entry.trace_id)
    assert got is not None and got.approval_status == "approved"
    assert tracer.counts()["total"] == 1


def test_export_jsonl_recreates_the_trace_file_from_sqlite(tmp_path: Path, tracer: Tracer) -> None:
    entries = _record(tracer, 5)
    tracer.update(entries[0].trace_id, error="late")
    out = tmp_path / "restored" / "traces.jsonl"
    assert tracer.export_jsonl(out) == 6
    assert out.read_bytes() == (tmp_path / "traces.jsonl").read_bytes()


def test_without_a_trace_file_verify_walks_the_chain_stored_in_sqlite(tmp_path: Path, db: Database) -> None:
    tracer = Tracer(make_settings(tmp_path, trace_file=""), db)
    _record(tracer, 3)
    report = tracer.verify()
    assert report["persistent"] is True and "files" not in report
    assert (report["chained"], report["last_seq"]) == (3, 3) and "break" not in report
    stored = bytes(db.query_one("SELECT line FROM trace_lines WHERE seq = 2")[0])
    db.execute("UPDATE trace_lines SET line = ? WHERE seq = 2", (stored.replace(b'"i":1', b'"i":9'),))
    assert tracer.verify()["break"]["seq"] == 2


@pytest.mark.served
def test_two_processes_appending_at_once_keep_one_valid_chain(tmp_path: Path) -> None:
    storage, trace_file = str(tmp_path / "flux7.db"), str(tmp_path / "traces.jsonl")
    Database(storage).close()  # migrate once, before the race
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [
        ctx.Process(target=workers.append_traces, args=(storage, trace_file, w, 150, 80_000, start)) for w in range(2)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    files = [Path(f"{trace_file}.old"), Path(trace_file)]
    assert files[0].exists()  # one rotation happened during the race
    v = verify_files(files, None)
    assert v.brk is None and (v.first_seq, v.last_seq, v.chained) == (1, 300, 300)
    agents = [json.loads(x)["agent_id"] for f in files for x in _lines(f)]
    assert agents.count("worker-0") == agents.count("worker-1") == 150  # both wrote into the one chain
    db = Database(storage)
    tracer = Tracer(make_settings(tmp_path), db)
    assert tracer.counts()["total"] == 300
    report = tracer.verify()
    assert "break" not in report and report["last_seq"] == 300
    db.close()
