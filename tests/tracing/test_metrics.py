from __future__ import annotations

import multiprocessing
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flux7.shared import __version__
from flux7.shared.metrics import FLUSH_SECONDS, OTHER, CallSample, Metrics, UpstreamState
from flux7.shared.settings import MetricsSettings
from flux7.shared.store.db import MIGRATIONS_DIR, Database
from tests.support.waiting import eventually

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
        assert f"\n{series} 0.0\n" in text
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
    m.observe("request_duration_seconds", 0.02, {"transport": "mcp"})
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
    duration = "agent_mesh_request_duration_seconds"
    assert samples[(f"{duration}_bucket", (("le", "0.01"), ("transport", "mcp")))] == 0
    assert samples[(f"{duration}_bucket", (("le", "0.025"), ("transport", "mcp")))] == 1
    assert samples[(f"{duration}_count", (("transport", "mcp"),))] == 1
    assert samples[(f"{duration}_count", (("transport", "stdio"),))] == 0  # every transport is shown


def test_unknown_series_and_wrong_labels_are_refused(db: Database) -> None:
    m = Metrics(db)
    with pytest.raises(ValueError, match="unknown counter"):
        m.inc("made_up_total")
    with pytest.raises(ValueError, match="labels"):
        m.inc("calls_total")
    with pytest.raises(ValueError, match="unknown histogram"):
        m.observe("made_up_seconds", 1)
    with pytest.raises(ValueError, match="labels"):
        m.observe("request_duration_seconds", 1)


def test_pending_approvals_count_the_table_when_it_exists(tmp_path: Path) -> None:  # expiry: see below
    only_mine = tmp_path / "migrations"
    only_mine.mkdir()
    shutil.copy(MIGRATIONS_DIR / "0002_traces.sql", only_mine)
    db = Database(tmp_path / "m.db", migrate=False)
    db.migrate(only_mine)
    m = Metrics(db)
    assert m.pending_approvals() == 0  # no approvals table yet
    db.execute("CREATE TABLE approvals (id TEXT PRIMARY KEY, status TEXT NOT NULL, expires_at REAL NOT NULL)")
    for i, status in enumerate(("pending", "pending", "approved")):
        db.execute("INSERT INTO approvals (id, status, expires_at) VALUES (?, ?, ?)", (str(i), status, 4e9))
    assert m.pending_approvals() == 2
    assert _samples(m.render())[("agent_mesh_approvals_pending", ())] == 2
    db.close()


@pytest.mark.served
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


def test_the_exposition_is_prometheus_clients_own_with_build_info(db: Database) -> None:
    text = Metrics(db).render(0)
    families = _families(text)
    assert families["flux7_build_info"].type == "gauge"  # type: ignore[attr-defined]
    assert _samples(text)[("flux7_build_info", (("version", __version__),))] == 1
    # every family announced once, each sample line under its own family
    assert text.count("# TYPE agent_mesh_calls_total counter\n") == 1
    assert text.endswith("\n") and "\n\n" not in text


def test_an_expired_approval_is_not_pending_even_before_a_sweep(db: Database) -> None:
    now = time.time()
    rows = [("a", "pending", now + 60), ("b", "pending", now - 1), ("c", "approved", now + 60)]
    for approval_id, status, expires in rows:
        db.execute(
            "INSERT INTO approvals (id, agent_id, tool, params, args_digest, status, created_at, expires_at)"
            " VALUES (?, 'claude', 't', '{}', '', ?, ?, ?)",
            (approval_id, status, now - 5, expires),
        )
    m = Metrics(db)
    assert m.pending_approvals() == 1
    assert m.pending_approvals(now=now + 61) == 0
    assert _samples(m.render())[("agent_mesh_approvals_pending", ())] == 1


def _call(tool: str, agent: str, outcome: str = "allow", **kw: object) -> CallSample:
    return CallSample(tool=tool, agent=agent, outcome=outcome, transport="rest", seconds=0.03, **kw)  # type: ignore[arg-type]


def test_red_series_count_by_tool_agent_and_outcome_and_overflow_to_other(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.db")
    m = Metrics(db, MetricsSettings(max_tools=2, max_agents=1))
    for tool, agent, outcome in [
        ("fs.read", "claude", "allow"),
        ("fs.read", "claude", "allow"),
        ("fs.write", "claude", "deny"),
        ("fs.delete", "claude", "halted"),  # a third tool: over the cap
        ("fs.read", "scout", "rate_limited"),  # a second agent: over the cap
    ]:
        m.record_call(_call(tool, agent, outcome))
    samples = _samples(m.render(0))
    calls = {k[1]: v for k, v in samples.items() if k[0] == "agent_mesh_tool_calls_total"}
    assert calls == {
        (("agent", "claude"), ("outcome", "allow"), ("tool", "fs.read")): 2,
        (("agent", "claude"), ("outcome", "deny"), ("tool", "fs.write")): 1,
        (("agent", "claude"), ("outcome", "halted"), ("tool", OTHER)): 1,
        (("agent", OTHER), ("outcome", "rate_limited"), ("tool", "fs.read")): 1,
    }
    hist = "agent_mesh_tool_call_duration_seconds"
    labels = (("agent", "claude"), ("outcome", "allow"), ("tool", "fs.read"))
    assert samples[(f"{hist}_count", labels)] == 2
    assert (
        samples[(f"{hist}_bucket", (("agent", "claude"), ("le", "0.025"), ("outcome", "allow"), ("tool", "fs.read")))]
        == 0
    )
    assert (
        samples[(f"{hist}_bucket", (("agent", "claude"), ("le", "0.05"), ("outcome", "allow"), ("tool", "fs.read")))]
        == 2
    )
    # a fresh process (another worker) knows the admitted values from the database, not from memory
    again = Metrics(db, MetricsSettings(max_tools=2, max_agents=1))
    again.record_call(_call("fs.delete", "claude"))
    again.record_call(_call("fs.write", "claude"))
    calls = {k[1]: v for k, v in _samples(again.render(0)).items() if k[0] == "agent_mesh_tool_calls_total"}
    assert calls[(("agent", "claude"), ("outcome", "allow"), ("tool", OTHER))] == 1
    assert calls[(("agent", "claude"), ("outcome", "allow"), ("tool", "fs.write"))] == 1
    db.close()


def test_label_values_survive_quotes_backslashes_and_newlines(db: Database) -> None:
    m = Metrics(db)
    odd = 'cli.say "hi" \\ there\nnow'
    m.record_call(_call(odd, "claude"))
    samples = _samples(m.render(0))
    assert samples[("agent_mesh_tool_calls_total", (("agent", "claude"), ("outcome", "allow"), ("tool", odd)))] == 1


def test_upstream_errors_and_the_up_gauge(db: Database) -> None:
    states = [UpstreamState("spec.json", "openapi"), UpstreamState("git", "cli"), UpstreamState("fs", "mcp", True)]
    m = Metrics(db, upstreams=lambda: states)
    samples = _samples(m.render(0))
    up = "agent_mesh_upstream_up"
    assert samples[(up, (("source", "openapi"), ("upstream", "spec.json")))] == 1  # no call yet: not known down
    assert samples[("agent_mesh_upstream_errors_total", (("source", "cli"), ("upstream", "git")))] == 0
    m.record_call(
        _call(
            "get_boom",
            "claude",
            "error",
            upstream="spec.json",
            source="openapi",
            upstream_seconds=0.01,
            upstream_failed=True,
            upstream_down=True,
        )
    )
    m.record_call(
        _call(
            "git.status", "claude", "error", upstream="git", source="cli", upstream_seconds=0.01, upstream_failed=True
        )
    )  # a non-zero exit: an error, but the binary ran
    samples = _samples(m.render(0))
    assert samples[(up, (("source", "openapi"), ("upstream", "spec.json")))] == 0
    assert samples[(up, (("source", "cli"), ("upstream", "git")))] == 1
    assert samples[(up, (("source", "mcp"), ("upstream", "fs")))] == 1
    assert samples[("agent_mesh_upstream_errors_total", (("source", "openapi"), ("upstream", "spec.json")))] == 1
    assert samples[("agent_mesh_upstream_errors_total", (("source", "cli"), ("upstream", "git")))] == 1
    assert samples[("agent_mesh_upstream_latency_seconds_count", ())] == 2
    m.record_call(_call("list_pets", "claude", upstream="spec.json", source="openapi", upstream_seconds=0.01))
    states[2] = UpstreamState("fs", "mcp", False)  # this worker lost its MCP connection
    samples = _samples(m.render(0))
    assert samples[(up, (("source", "openapi"), ("upstream", "spec.json")))] == 1
    assert samples[(up, (("source", "mcp"), ("upstream", "fs")))] == 0


@pytest.mark.served
def test_the_label_cap_holds_across_worker_processes(tmp_path: Path) -> None:
    storage = str(tmp_path / "flux7.db")
    Database(storage).close()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=workers.distinct_tools, args=(storage, w, 30, 10, start)) for w in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = Database(storage)
    calls = {k[1]: v for k, v in _samples(Metrics(db).render(0)).items() if k[0] == "agent_mesh_tool_calls_total"}
    tools = {dict(labels)["tool"] for labels in calls}
    assert len(tools - {OTHER}) == 10 and OTHER in tools
    assert sum(calls.values()) == 60
    db.close()


def test_a_recorded_call_stores_what_its_separate_increments_and_observations_store(tmp_path: Path) -> None:
    # record_call and count_action remember label texts per label set (issue 19): the stored rows must be those
    # the checked, one-series-at-a-time writers produce, bucket by bucket, whatever order the sets come in.
    fast = Database(tmp_path / "fast.db")
    slow = Database(tmp_path / "slow.db")
    f, s = Metrics(fast), Metrics(slow)
    calls = [
        ("t1", "a", "allow", "rest", 0.004, "u", 0.001, False, False),
        ("t2", "a", "error", "mcp", 0.3, "u", 0.25, True, True),
        ("t1", "b", "allow", "rest", 400.0, "", None, False, False),
        ("t1", "a", "allow", "rest", 0.005, "u", 0.006, False, False),
        ("t2", "b", "deny", "decide", 0.02, "", None, False, False),
        ("t1", "a", "allow", "stdio", 0.0, "v", 0.0, True, False),
    ]
    for tool, agent, outcome, transport, seconds, upstream, up_s, failed, down in calls * 2:
        f.record_call(
            CallSample(
                tool=tool,
                agent=agent,
                outcome=outcome,
                transport=transport,
                seconds=seconds,
                upstream=upstream,
                source="openapi" if upstream else "",
                upstream_seconds=up_s,
                upstream_failed=failed,
                upstream_down=down,
            )
        )
        f.count_action(outcome)
        red = {"tool": tool, "agent": agent, "outcome": outcome}
        s.inc("tool_calls_total", red)
        s.observe("tool_call_duration_seconds", seconds, red)
        s.observe("request_duration_seconds", seconds, {"transport": transport})
        if up_s is not None:
            s.observe("upstream_latency_seconds", up_s)
        if upstream:
            if failed:
                s.inc("upstream_errors_total", {"upstream": upstream, "source": "openapi"})
            with slow.write() as conn:
                conn.execute(
                    "INSERT INTO metric_values (name, labels, value) VALUES (?, ?, ?) ON CONFLICT (name, labels)"
                    " DO UPDATE SET value = excluded.value",
                    ("agent_mesh_upstream_up", f'source="openapi",upstream="{upstream}"', 0.0 if down else 1.0),
                )
        s.inc("calls_total", {"action": outcome})
    assert f.values() == s.values()
    assert f.render(0) == s.render(0)


# -- a serving worker holds its series in memory (issue 19) -----------------------------------------------------


def _stored(path: Path) -> dict[tuple[str, str], float]:
    """What another worker (its own connection) reads of the series."""
    other = Database(path)
    try:
        return Metrics(other).values()
    finally:
        other.close()


@pytest.fixture
async def held(tmp_path: Path) -> AsyncIterator[Metrics]:
    """A started worker's Metrics over tmp_path/m.db, stopped (what it holds written) at the end."""
    db = Database(tmp_path / "m.db")
    m = Metrics(db)
    m.start()
    try:
        yield m
    finally:
        await m.stop()
        db.close()


async def test_a_worker_holds_its_series_and_a_scrape_writes_them_in_one_transaction(
    tmp_path: Path, held: Metrics
) -> None:
    m, db = held, held.db
    for _ in range(3):
        m.count_action("allow")
        m.record_call(_call("list_pets", "claude", upstream="api", source="openapi", upstream_seconds=0.01))
    assert _stored(tmp_path / "m.db") == {}  # nothing written per call
    seen: list[str] = []
    db.trace_statements(seen.append)
    samples = _samples(m.render(0))
    db.trace_statements(None)
    assert samples[("agent_mesh_calls_total", (("action", "allow"),))] == 3
    red = (("agent", "claude"), ("outcome", "allow"), ("tool", "list_pets"))
    assert samples[("agent_mesh_tool_calls_total", red)] == 3
    # BEGIN, the summed additions, the last-wins gauge, COMMIT: one transaction for the three calls
    writes = [s for s in seen if not s.lstrip().upper().startswith("SELECT")]
    assert len(writes) == 4 and writes[-1].strip().upper() == "COMMIT"
    stored = _stored(tmp_path / "m.db")
    assert stored[("agent_mesh_calls_total", 'action="allow"')] == 3
    assert stored[("agent_mesh_upstream_up", 'source="openapi",upstream="api"')] == 1


async def test_a_worker_that_holds_its_calls_stores_the_same_series_as_one_writing_each_call(
    tmp_path: Path, held: Metrics
) -> None:
    # Held calls are tallied per label set and bucket and expanded into rows when written: the rows must be those a
    # worker writing every call itself stores, over every kind of call (no duration, no upstream, a failed one, two
    # latency buckets, an agent over the cap counted as `other`).
    settings = MetricsSettings(max_tools=10, max_agents=2)
    held.caps = {"tool": settings.max_tools, "agent": settings.max_agents}
    direct_db = Database(tmp_path / "direct.db")
    direct = Metrics(direct_db, settings)
    calls = [
        _call("list_pets", "claude", upstream="api", source="openapi", upstream_seconds=0.004),
        _call("list_pets", "claude", upstream="api", source="openapi", upstream_seconds=0.2),
        _call("list_pets", "claude", "error", upstream="api", source="openapi", upstream_failed=True),
        CallSample(tool="fs.read", agent="scout", outcome="deny", transport="mcp", seconds=float("nan")),
        CallSample(tool="fs.read", agent="scout", outcome="allow", transport="mcp", seconds=7.5),
        _call("fs.read", "third-agent", upstream="api", source="openapi", upstream_seconds=float("nan")),
        _call("list_pets", "claude", upstream="api", source="openapi", upstream_seconds=0.004, upstream_down=True),
    ]
    for sample in calls * 3:
        direct.record_call(sample)
        held.record_call(sample)
    held.flush()
    stored, expected = _stored(tmp_path / "m.db"), direct.values()
    direct_db.close()
    assert set(stored) == set(expected)
    assert stored == pytest.approx(expected)
    assert stored[("agent_mesh_upstream_up", 'source="openapi",upstream="api"')] == 0  # the last call's, as written
    assert stored[("agent_mesh_tool_calls_total", f'agent="{OTHER}",outcome="allow",tool="fs.read"')] == 3
    # and what those calls add up to, worked out by hand: three rounds of the seven
    assert stored[("agent_mesh_upstream_errors_total", 'source="openapi",upstream="api"')] == 3
    assert stored[("agent_mesh_upstream_latency_seconds_count", "")] == 9
    assert stored[("agent_mesh_upstream_latency_seconds_bucket", 'le="0.005"')] == 6
    assert stored[("agent_mesh_upstream_latency_seconds_bucket", 'le="0.25"')] == 3
    assert stored[("agent_mesh_upstream_latency_seconds_sum", "")] == pytest.approx(3 * 0.208)
    scout_deny = 'agent="scout",outcome="deny",tool="fs.read"'
    assert stored[("agent_mesh_tool_calls_total", scout_deny)] == 3
    assert ("agent_mesh_tool_call_duration_seconds_count", scout_deny) not in stored  # no duration: no observation
    assert stored[("agent_mesh_request_duration_seconds_count", 'transport="mcp"')] == 3
    assert stored[("agent_mesh_request_duration_seconds_count", 'transport="rest"')] == 15


async def test_held_series_reach_the_database_within_the_interval_without_a_scrape(
    tmp_path: Path, held: Metrics
) -> None:
    m = held
    m.count_action("deny")
    await eventually(
        lambda: _stored(tmp_path / "m.db").get(("agent_mesh_calls_total", 'action="deny"')) == 1,
        timeout=FLUSH_SECONDS * 20,
        what="the held series written by the worker's own flush",
    )


async def test_a_failed_flush_keeps_the_series_and_the_next_one_writes_them_summed(
    tmp_path: Path, held: Metrics
) -> None:
    m, db = held, held.db
    m.count_action("allow")
    m.record_call(_call("t", "a", upstream="api", source="openapi", upstream_down=True, upstream_failed=True))
    db.execute("ALTER TABLE metric_values RENAME TO metric_values_away")
    with pytest.raises(Exception, match="metric_values"):
        m.flush()
    m.count_action("allow")
    m.record_call(_call("t", "a", upstream="api", source="openapi"))  # the gauge set since is the newer
    db.execute("ALTER TABLE metric_values_away RENAME TO metric_values")
    m.flush()
    stored = _stored(tmp_path / "m.db")
    assert stored[("agent_mesh_calls_total", 'action="allow"')] == 2
    assert stored[("agent_mesh_upstream_errors_total", 'source="openapi",upstream="api"')] == 1
    assert stored[("agent_mesh_upstream_up", 'source="openapi",upstream="api"')] == 1


async def test_stopping_writes_what_is_held_and_later_series_go_straight_to_the_database(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.db")
    m = Metrics(db)
    m.start()
    m.count_action("halted")
    await m.stop()
    assert _stored(tmp_path / "m.db")[("agent_mesh_calls_total", 'action="halted"')] == 1
    m.count_action("halted")
    assert _stored(tmp_path / "m.db")[("agent_mesh_calls_total", 'action="halted"')] == 2
    db.close()
