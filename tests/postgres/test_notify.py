"""LISTEN/NOTIFY behind the store seam (shared/store/notify.py): a notification sent inside a write reaches
another connection's listener at commit and never for a rollback; a listener cut off reconnects and says so;
SQLite has no notifications and says so, so its callers poll."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from flux7.shared.store.db import Database
from tests.support.waiting import wait_until


@pytest.fixture
def pair(postgres_url: str) -> Iterator[tuple[Database, Database]]:
    """Two stores on one database, as two instances hold them."""
    one, two = Database(postgres_url), Database(postgres_url)
    yield one, two
    one.close()
    two.close()


def _listener_pids(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_a_notification_reaches_the_other_instance_at_commit_and_never_for_a_rollback(
    pair: tuple[Database, Database], postgres_url: str
) -> None:
    listener, sender = pair
    heard: list[str] = []
    lock = threading.Lock()

    def hear(payload: str) -> None:
        with lock:
            heard.append(payload)

    assert listener.listen("flux7_approvals", hear) is True
    wait_until(lambda: listener.listening, timeout=10, what="the listener to connect")
    wait_until(lambda: "*" in heard, timeout=5, what="the (re)connection to be announced")

    with pytest.raises(RuntimeError), sender.write() as conn:
        sender.notify(conn, "flux7_approvals", "rolled-back")
        raise RuntimeError("abandon the transaction")
    with sender.write() as conn:
        sender.notify(conn, "flux7_approvals", "aaaa,bbbb")
        # not delivered before the commit
        assert "aaaa,bbbb" not in heard
    wait_until(lambda: "aaaa,bbbb" in heard, timeout=5, what="the committed notification")
    assert "rolled-back" not in heard
    with pytest.raises(ValueError, match="not a flux7 channel"):
        listener.listen("other", hear)

    # the listening connection cut: the listener says it is down, comes back, and announces it
    before = heard.count("*")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for pid in _listener_pids(postgres_url):
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_until(lambda: heard.count("*") > before, timeout=10, what="the listener to reconnect")
    assert listener.listening
    with sender.write() as conn:
        sender.notify(conn, "flux7_approvals", "cccc")
    wait_until(lambda: "cccc" in heard, timeout=5, what="a notification after the reconnection")


def test_sqlite_has_no_notifications_so_its_callers_poll(tmp_path: Path) -> None:
    db = Database(tmp_path / "flux7.db")
    try:
        assert db.listen("flux7_approvals", lambda payload: None) is False
        assert db.listening is False
        with db.write() as conn:
            db.notify(conn, "flux7_approvals", "ignored")  # nothing to send, and no error
    finally:
        db.close()
