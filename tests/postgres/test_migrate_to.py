"""`flux7 db migrate-to`: a SQLite deployment that served real traffic (governed calls, denials, approvals, grants,
a halt, an agent token, memory facts) copied into PostgreSQL, every row equal, both chains verified; then `flux7
serve` on PostgreSQL shows the same deployment and keeps writing after it (the ids continue). Bad input is one
line and exit 2."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import postgres
from tests.support.http import free_port, wait_until
from tests.support.mesh import PETS_POLICY, pets_mesh_config
from tests.support.server import REPO, running_server
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}


def flux7(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def post(url: str, path: str, body: dict[str, Any], headers: dict[str, str] = ADMIN) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=60, trust_env=False)


def get(url: str, path: str, **params: Any) -> Any:
    r = httpx.get(f"{url}{path}", params=params, headers=ADMIN, timeout=30, trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def rpc(url: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    answer = post(url, "/rpc", body).json()
    assert "error" not in answer and not answer["result"].get("isError"), answer
    return dict(answer["result"])


def serve_traffic(url: str) -> dict[str, Any]:
    """What a week of use leaves behind, written through the API."""
    for i in range(30):
        assert post(url, "/tool/list_pets", {"params": {"limit": i + 1}}, AGENT).status_code == 200
    for _ in range(3):
        assert post(url, "/tool/delete_pet", {"params": {"petId": "1"}}, AGENT).status_code == 403
    for i in range(12):
        rpc(url, "memory_store", {"key": f"runbook.{i}", "value": f"step {i}: restart with care ünï", "tags": ["ops"]})
    grants = [post(url, "/grants", {"agent": f"ops{i}", "tools": "get_*", "duration": "2h"}) for i in range(2)]
    assert [g.status_code for g in grants] == [201, 201]
    halt = post(url, "/halts", {"scope": "agent", "target": "ops1", "reason": "drill"})
    assert halt.status_code == 201
    assert post(url, f"/halts/{halt.json()['halt']['id']}/resume", {}).status_code == 200
    token = post(url, "/tokens", {"agent": "claude", "note": "before the move"})
    assert token.status_code == 201, token.text

    # two calls held for a human: one approved (it runs), one denied
    results: list[int] = []
    threads = [
        threading.Thread(
            target=lambda i=i: results.append(
                post(url, "/tool/create_pet", {"params": {"name": f"pet{i}"}}, AGENT).status_code
            )
        )
        for i in range(2)
    ]
    for t in threads:
        t.start()
    pending = wait_until(
        lambda: (lambda p: p if len(p) == 2 else None)(get(url, "/approvals", status="pending")),
        timeout=30,
        what="two pending approvals",
    )
    for verb, approval in zip(("approve", "deny"), pending, strict=True):
        assert post(url, f"/approvals/{approval['id']}/{verb}", {"resolved_by": "ann"}).status_code == 200
    for t in threads:
        t.join(30)
    assert sorted(results) == [200, 403]
    return {"token": token.json()["token"], "grants": sorted(g.json()["id"] for g in grants)}


def sqlite_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        names = [
            r[0]
            for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith(("sqlite_", "facts_fts")) and r[0] != "schema_migrations"
        ]
        out = {}
        for name in names:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")')]
            select = ", ".join(f'"{c}"' for c in columns)
            out[name] = sorted((tuple(r) for r in conn.execute(f'SELECT {select} FROM "{name}"')), key=repr)
        return out
    finally:
        conn.close()


def postgres_rows(url: str, like: dict[str, list[tuple[Any, ...]]], source: Path) -> dict[str, list[tuple[Any, ...]]]:
    lite = sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True)
    out = {}
    with psycopg.connect(url) as conn:
        for name in like:
            columns = [r[1] for r in lite.execute(f'PRAGMA table_info("{name}")')]
            select = ", ".join(f'"{c}"' for c in columns)
            out[name] = sorted((tuple(r) for r in conn.execute(f'SELECT {select} FROM "{name}"')), key=repr)
    lite.close()
    return out


def test_a_sqlite_deployment_moves_to_postgresql_whole_and_serves_there(
    tmp_path: Path, backend: Backend, postgres_admin_url: str
) -> None:
    config = pets_mesh_config(tmp_path, backend, PETS_POLICY, memory="{enabled: true, hybrid: false}")
    with running_server(config) as server:
        wrote = serve_traffic(server.url)
        verify_before = get(server.url, "/traces/verify")
        health_before = get(server.url, "/health")["traces"]
        traces_before = get(server.url, "/traces", limit=1000)
        # decision facts reach memory in the background: let them land before the server stops
        wait_until(
            lambda: get(server.url, "/memory/chain")["report"]["entries"] == 12 + 2,
            timeout=30,
            what="the two decision facts in memory",
        )
    source = tmp_path / "flux7.db"
    assert verify_before.get("break") is None and verify_before["chained"] >= 35

    # an empty database, never migrated: migrate-to applies the schema itself
    url = postgres.create_database(postgres_admin_url, empty=True)
    try:
        done = flux7("db", "migrate-to", url, "--config", str(config))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verified: every row count matches and the chains hold" in done.stdout
        assert f"trace chain holds: {verify_before['chained']} lines" in done.stdout
        assert "memory chain holds: 14 entries" in done.stdout
        assert "FTS5 index: PostgreSQL indexes itself): facts_fts" in done.stdout
        assert "copy" in done.stderr  # the progress bar, on stderr
        # the decisions were signed with the generated key: the report says what every instance needs
        assert "decisions.signing_key" in done.stdout

        # every row of every table, value for value
        before = sqlite_rows(source)
        after = postgres_rows(url, before, source)
        for name in before:
            assert after[name] == before[name], f"table {name} differs"
        assert len(before["approvals"]) == 2 and len(before["grants"]) == 2 and len(before["agent_tokens"]) == 1
        assert len(before["facts"]) >= 14

        # a second run refuses: the target is no longer empty
        again = flux7("db", "migrate-to", url, "--config", str(config))
        assert again.returncode == 2, again.stdout + again.stderr
        assert "is not empty: " in again.stderr and "traces (" in again.stderr

        # the deployment on PostgreSQL: the same traces, chain, grants, approvals, memory; and it keeps writing
        moved = tmp_path / "pg"
        moved.mkdir()
        (moved / "policies").mkdir()
        (moved / "policies" / "agents.yaml").write_text(PETS_POLICY)
        on_pg = pets_mesh_config(
            moved, backend, PETS_POLICY, memory="{enabled: true, hybrid: false}", extra=f"database: {url}"
        )
        # the same signing key as before the move (the report's note), so old decisions still count
        key = (tmp_path / "decisions.key").read_text().strip()
        on_pg.write_text(on_pg.read_text() + f"decisions: {{signing_key: '{key}'}}\n")
        with running_server(on_pg) as pg:
            traces = get(pg.url, "/traces", limit=1000)
            assert [t["trace_id"] for t in traces] == [t["trace_id"] for t in traces_before]
            assert get(pg.url, "/health")["traces"] == health_before
            report = get(pg.url, "/traces/verify")
            assert report.get("break") is None and report["chained"] == verify_before["chained"]
            assert report["head"] == verify_before["head"]
            assert sorted(g["id"] for g in get(pg.url, "/grants")) == wrote["grants"]
            statuses = sorted(a["status"] for a in get(pg.url, "/approvals", status="all"))
            assert statuses == ["approved", "denied"]
            recalled = rpc(pg.url, "memory_recall", {"key": "runbook.7"})
            assert "step 7: restart with care ünï" in recalled["content"][0]["text"]
            searched = rpc(pg.url, "memory_search", {"query": "restart care"})
            assert "runbook." in searched["content"][0]["text"]
            chain = get(pg.url, "/memory/chain")
            assert chain["holds"] is True and chain["report"]["entries"] == 14
            # the agent token issued before the move still authenticates
            as_token = {"Authorization": f"Bearer {wrote['token']}"}
            assert post(pg.url, "/tool/list_pets", {"params": {"limit": 1}}, as_token).status_code == 200
            # new writes take ids after the copied ones (sequences advanced), and the chain goes on
            for i in range(3):
                assert post(pg.url, "/tool/list_pets", {"params": {"limit": i}}, AGENT).status_code == 200
            rpc(pg.url, "memory_store", {"key": "after.move", "value": "written on PostgreSQL"})
            report = get(pg.url, "/traces/verify")
            assert report.get("break") is None and report["chained"] > verify_before["chained"] + 4
            assert len(get(pg.url, "/traces", limit=1000)) == len(traces_before) + 4
            assert get(pg.url, "/memory/chain")["holds"] is True
        assert not (moved / "flux7.db").exists()
        with psycopg.connect(url) as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM traces ORDER BY id")]
        assert len(ids) == len(set(ids)) == len(before["traces"]) + 4
    finally:
        postgres.drop_database(postgres_admin_url, url)


def _sqlite_deployment(tmp_path: Path) -> Path:
    from flux7.shared.store.db import Database

    Database(tmp_path / "flux7.db").close()
    return tmp_path / "flux7.db"


def test_a_migrated_empty_target_takes_a_copy_and_sequences_follow_sqlites_high_water(
    tmp_path: Path, postgres_url: str
) -> None:
    source = _sqlite_deployment(tmp_path)
    conn = sqlite3.connect(source)
    # ids 1..5 handed out, 4 and 5 deleted: AUTOINCREMENT never reuses them, nor may PostgreSQL
    for i in range(5):
        conn.execute(
            "INSERT INTO governance_evidence (agent_id, kind, trace_id, tool, ts_ns) VALUES (?, 'deny', ?, 't', 1)",
            (f"a{i}", f"tr{i}"),
        )
    conn.execute("DELETE FROM governance_evidence WHERE id > 3")
    # an outbox emptied after delivery: its next id still follows the 7 handed out
    for _ in range(7):
        conn.execute("INSERT INTO memory_sse_outbox (session, payload) VALUES ('s', x'00')")
    conn.execute("DELETE FROM memory_sse_outbox")
    conn.commit()
    conn.close()
    done = flux7("db", "migrate-to", postgres_url, "--from", str(source))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "governance_evidence" in done.stdout and "trace chain: no traces" in done.stdout
    with psycopg.connect(postgres_url) as pg:
        (new_id,) = pg.execute(
            "INSERT INTO governance_evidence (agent_id, kind, trace_id, tool, ts_ns) VALUES ('b', 'deny', 'x', 't', 1)"
            " RETURNING id"
        ).fetchone()
        (outbox_id,) = pg.execute(
            "INSERT INTO memory_sse_outbox (session, payload) VALUES ('s', '\\x00') RETURNING id"
        ).fetchone()
    assert (new_id, outbox_id) == (6, 8)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("mysql://flux7@db/flux7", "not a postgresql:// URL: mysql://…"),
        ("/var/lib/flux7/other.db", "not a postgresql:// URL: '/var/lib/flux7/other.db'"),
    ],
)
def test_a_target_that_is_not_postgresql_is_refused(
    tmp_path: Path, target: str, message: str, postgres_admin_url: str
) -> None:
    done = flux7("db", "migrate-to", target, "--from", str(_sqlite_deployment(tmp_path)))
    assert done.returncode == 2 and done.stderr.strip() == f"flux7 db migrate-to: {message}", done.stderr


def test_an_unreachable_server_is_one_line_without_the_password(tmp_path: Path, postgres_admin_url: str) -> None:
    url = f"postgresql://flux7:s3cret@127.0.0.1:{free_port()}/flux7?connect_timeout=1"
    done = flux7("db", "migrate-to", url, "--from", str(_sqlite_deployment(tmp_path)))
    assert done.returncode == 2, done.stderr
    assert "storage unavailable: cannot connect to postgresql://flux7:***@127.0.0.1" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    # a server that answers, with the reason it gives
    missing_db = postgres.with_database(postgres_admin_url, "no_such_database")
    done = flux7("db", "migrate-to", missing_db, "--from", str(tmp_path / "flux7.db"))
    assert done.returncode == 2 and 'database "no_such_database" does not exist' in done.stderr, done.stderr


def test_a_missing_or_foreign_source_is_refused_before_the_target_is_touched(tmp_path: Path, postgres_url: str) -> None:
    missing = flux7("db", "migrate-to", postgres_url, "--from", str(tmp_path / "none.db"))
    assert missing.returncode == 2 and f"{tmp_path / 'none.db'}: no such file" in missing.stderr
    # without --from: the config's storage_path
    config = tmp_path / "config.yaml"
    config.write_text("storage_path: data/flux7.db\nmemory: {enabled: false}\n")
    by_config = flux7("db", "migrate-to", postgres_url, "--config", str(config))
    assert by_config.returncode == 2 and f"{tmp_path / 'data' / 'flux7.db'}: no such file" in by_config.stderr
    (tmp_path / "notes.txt").write_text("not a database\n")
    foreign = flux7("db", "migrate-to", postgres_url, "--from", str(tmp_path / "notes.txt"))
    assert foreign.returncode == 2 and "not an SQLite database" in foreign.stderr
    # a SQLite file that is no flux7 database, and one from a newer flux7
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    other = flux7("db", "migrate-to", postgres_url, "--from", str(tmp_path / "other.db"))
    assert other.returncode == 2 and "not a flux7 database" in other.stderr
    newer = _sqlite_deployment(tmp_path / "newer")
    with sqlite3.connect(newer) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES ('9999_future.sql', '2027-01-01T00:00:00Z')")
    refused = flux7("db", "migrate-to", postgres_url, "--from", str(newer))
    assert refused.returncode == 2 and "written by a newer flux7" in refused.stderr
    with psycopg.connect(postgres_url) as pg:  # nothing was written
        assert pg.execute("SELECT count(*) FROM traces").fetchone() == (0,)


def test_a_copy_whose_trace_chain_does_not_verify_exits_1_and_says_so(tmp_path: Path, postgres_url: str) -> None:
    source = _sqlite_deployment(tmp_path)
    with sqlite3.connect(source) as conn:
        # a head that claims a line the stored chain does not hold (a truncated or edited store)
        conn.execute('INSERT INTO trace_lines (seq, line) VALUES (1, CAST(\'{"tool":"x"}\' AS BLOB))')
        conn.execute("UPDATE trace_chain SET seq = 1, hash = 'ab' WHERE id = 1")
    done = flux7("db", "migrate-to", postgres_url, "--from", str(source))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "trace chain BROKEN" in done.stdout
    assert "does not verify: trace chain: " in done.stderr and "head is seq 1" in done.stderr
    assert "drop that database and create it anew" in done.stderr


def test_a_value_postgresql_cannot_hold_rolls_the_whole_copy_back(tmp_path: Path, postgres_url: str) -> None:
    source = _sqlite_deployment(tmp_path)
    with sqlite3.connect(source) as conn:
        conn.execute("INSERT INTO grants (id, agent, tools, created_at, expires_at) VALUES ('g1', 'a', '*', 1, 2)")
        # SQLite keeps text in an INTEGER column; PostgreSQL's bigint cannot take it
        conn.execute("INSERT INTO rate_totals (agent_id, total, last_at) VALUES ('a', 'lots', 1.0)")
    done = flux7("db", "migrate-to", postgres_url, "--from", str(source))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the copy failed, nothing was committed: table rate_totals, column total: 'lots' is not a int8" in (
        done.stderr
    )
    with psycopg.connect(postgres_url) as pg:  # the grants copied before it were rolled back too
        assert pg.execute("SELECT count(*) FROM grants").fetchone() == (0,)
    # fixed at the source, the same command goes through
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE rate_totals SET total = 3")
    assert flux7("db", "migrate-to", postgres_url, "--from", str(source)).returncode == 0
