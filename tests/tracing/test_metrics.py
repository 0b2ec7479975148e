from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.db import MIGRATIONS_DIR, Database
from shared.metrics import Metrics

from . import workers


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_the_mem7_counters_are_always_served_at_zero_with_help_and_type(db: Database) -> None:
    text = Metrics(db).render(0)
    for name in ("attempted", "succeeded", "failed"):
        series = f"agent_mesh_mem7_writes_{name}_total"
        assert f"# HELP {series} " in text and f"# TYPE {series} counter\n" in text
        assert f"\n{series} 0\n" in text
    families = _families(text)
    assert families["agent_mesh_mem7_writes_attempted"].type == "counter"  # type: ignore[attr-defined]
    assert families["agent_mesh_approvals_pending"].type == "gauge"  # type: ignore[attr-defined]
    samples = _samples(text)
    assert samples[("agent_mesh_calls_total", (("action", "halted"),))] == 0


def test_counters_histograms_and_the_pending_gauge_render_what_was_recorded(db: Database) -> None:
    m = Metrics(db)
    m.inc("mem7_writes_attempted_total", by=2)
    m.inc("agent_mesh_mem7_writes_failed_total")
    m.inc("calls_total", {"action": "allow"})
    m.inc("calls_total", {"action": "allow"})
    m.inc("calls_total", {"action": "deny"})
    for seconds in (0.003, 0.2, 0.2, 120):
        m.observe("upstream_latency_seconds", seconds)
    samples = _samples(m.render(pending_approvals=4))
    assert samples[("agent_mesh_mem7_writes_attempted_total", ())] == 2
    assert samples[("agent_mesh_mem7_writes_failed_total", ())] == 1
    assert samples[("agent_mesh_calls_total", (("action", "allow"),))] == 2
    assert samples[("agent_mesh_calls_total", (("action", "deny"),))] == 1
    hist = "agent_mesh_upstream_latency_seconds"
    assert samples[(f"{hist}_bucket", (("le", "0.005"),))] == 1
    assert samples[(f"{hist}_bucket", (("le", "0.1"),))] == 1
    assert samples[(f"{hist}_bucket", (("le", "0.25"),))] == 3
    assert samples[(f"{hist}_bucket", (("le", "60.0"),))] == 3
    assert samples[(f"{hist}_bucket", (("le", "+Inf"),))] == 4
    assert samples[(f"{hist}_count", ())] == 4
    assert samples[(f"{hist}_sum", ())] == pytest.approx(120.403)
    assert samples[("agent_mesh_approvals_pending", ())] == 4


def test_unknown_series_and_wrong_labels_are_refused(db: Database) -> None:
    m = Metrics(db)
    with pytest.raises(ValueError, match="unknown counter"):
        m.inc("made_up_total")
    with pytest.raises(ValueError, match="labels"):
        m.inc("calls_total")
    with pytest.raises(ValueError, match="unknown histogram"):
        m.observe("made_up_seconds", 1)


def test_pending_approvals_count_the_table_when_it_exists(tmp_path: Path) -> None:
    only_mine = tmp_path / "migrations"
    only_mine.mkdir()
    shutil.copy(MIGRATIONS_DIR / "0002_traces.sql", only_mine)
    db = Database(tmp_path / "m.db", migrate=False)
    db.migrate(only_mine)
    m = Metrics(db)
    assert m.pending_approvals() == 0  # no approvals table yet
    db.execute("CREATE TABLE approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
    for i, status in enumerate(("pending", "pending", "approved")):
        db.execute("INSERT INTO approvals (id, status) VALUES (?, ?)", (str(i), status))
    assert m.pending_approvals() == 2
    assert _samples(m.render())[("agent_mesh_approvals_pending", ())] == 2
    db.close()


def test_counters_add_up_across_worker_processes(tmp_path: Path) -> None:
    storage = str(tmp_path / "flux7.db")
    Database(storage).close()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=workers.bump_counters, args=(storage, 200, start)) for _ in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = Database(storage)
    samples = _samples(Metrics(db).render(0))
    assert samples[("agent_mesh_mem7_writes_attempted_total", ())] == 400
    assert samples[("agent_mesh_upstream_latency_seconds_count", ())] == 400
    db.close()
