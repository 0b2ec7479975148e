"""The mesh's signature over decision facts, its key, and the outbox written in the resolution's transaction."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.decisions.facts import decision_fact, signed_decision
from flux7.shared.decisions.outbox import DecisionOutbox
from flux7.shared.decisions.signing import DecisionSigner, load_or_create_key, signer_for
from flux7.shared.errors import ConfigError
from flux7.shared.gate.approvals import ApprovalQueue
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database

SIGNER = DecisionSigner(b"s" * 32)
DECISION = {"approval_id": "0123456789abcdef", "tool": "fs.read", "agent": "claude", "status": "approved"}


def test_a_signed_fact_verifies_and_any_changed_field_breaks_it() -> None:
    fact = decision_fact(**DECISION, resolved_by="alice", resolved_at=1_700_000_000.1234, signer=SIGNER)
    at = next(t for t in fact.tags if t.startswith("at:"))
    assert at == "at:1700000000123"
    signed = signed_decision(fact.key, fact.tags, "fs.read", "claude", SIGNER)
    assert signed is not None and (signed.approval_id, signed.status, signed.kind) == (
        "0123456789abcdef",
        "approved",
        "human",
    )
    tags = list(fact.tags)

    def swap(old: str, new: str) -> list[str]:
        return [new if t == old else t for t in tags]

    variants: list[tuple[str, list[str], str, str]] = [
        ("another approval id", tags, "fs.read", "claude"),
        ("another agent", tags, "fs.read", "mallory"),
        ("another tool", tags, "fs.write", "claude"),
    ]
    keys = {"another approval id": "decision.fs.read.fedcba9876543210"}
    for what, variant, tool, agent in variants:
        key = keys.get(what, f"decision.{tool}.0123456789abcdef")
        assert signed_decision(key, variant, tool, agent, SIGNER) is None, what
    for what, variant in [
        ("another outcome", swap("approved", "denied")),
        ("another resolver kind", swap("by:human", "by:supervisor")),
        ("another time", swap(at, f"at:{int(at[3:]) + 1}")),
        ("no signature", [t for t in tags if not t.startswith("sig:")]),
        ("two outcomes", [*tags, "denied"]),
        ("a made-up signature", [t if not t.startswith("sig:") else "sig:" + "0" * 64 for t in tags]),
    ]:
        assert signed_decision(fact.key, variant, "fs.read", "claude", SIGNER) is None, what
    assert signed_decision(fact.key, tags, "fs.read", "claude", DecisionSigner(b"t" * 32)) is None, "another key"


def test_the_key_file_is_created_once_0600_and_shared_by_concurrent_starters(tmp_path: Path) -> None:
    path = tmp_path / "data" / "decisions.key"
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: load_or_create_key(path), range(16)))
    assert len(keys) == 1 and len(next(iter(keys))) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["decisions.key"]  # no temporary file left behind
    assert load_or_create_key(path) in keys
    path.write_text("short\n")
    with pytest.raises(ConfigError, match="at least 32"):
        load_or_create_key(path)


def test_the_configured_key_wins_and_a_short_one_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("decisions: {signing_key: '${KEY}'}\n")
    settings = load_settings(config, env={"KEY": "k" * 40})
    signer = signer_for(settings, str(tmp_path / "flux7.db"))
    assert signer.mac(**DECISION, kind="human", at_ms=1) == DecisionSigner(b"k" * 40).mac(
        **DECISION, kind="human", at_ms=1
    )
    assert not (tmp_path / "decisions.key").exists()
    with pytest.raises(ConfigError, match=r"decisions\.signing_key"):
        load_settings(config, env={"KEY": "too-short"})
    config.write_text("decisions: {retry_max_seconds: 0}\n")
    with pytest.raises(ConfigError, match=r"decisions\.retry_max_seconds"):
        load_settings(config, env={})


def _queue(db: Database) -> ApprovalQueue:
    return ApprovalQueue(db, load_settings(None, env={}))


def _submit(queue: ApprovalQueue, n: int = 0) -> Any:
    return queue.submit(agent="claude", tool="t", arguments={"n": n}, trace_id="", policy_rule="r", policy_version="")


def test_a_resolution_and_its_outbox_row_commit_together(store: Database) -> None:
    db = store
    queue = _queue(db)
    outbox = DecisionOutbox(db)

    def enqueue(conn: Any, resolved: list[Any]) -> None:
        for a in resolved:
            fact = decision_fact(approval_id=a.id, tool=a.tool, agent=a.agent_id, status=a.status, resolved_by="x")
            outbox.enqueue(conn, key=fact.key, approval_id=a.id, tool=a.tool, agent=a.agent_id, arguments={})
            outbox.enqueue(conn, key=fact.key, approval_id=a.id, tool=a.tool, agent=a.agent_id, arguments={})

    queue.add_transaction_hook(enqueue)
    first = _submit(queue)
    queue.resolve(first.id, "approve", resolved_by="alice", resolver="")
    assert [r.key for r in outbox.head()] == [f"decision.t.{first.id}"]  # the same key twice is one row

    # A hook that cannot write rolls the resolution back: no approval is settled without its fact.
    def broken(conn: Any, resolved: list[Any]) -> None:
        raise RuntimeError("disk full")

    queue.add_transaction_hook(broken)
    second = _submit(queue, 1)
    with pytest.raises(RuntimeError):
        queue.resolve(second.id, "deny", resolved_by="alice", resolver="")
    assert queue.get(second.id).status == "pending"
    assert [r.key for r in outbox.head()] == [f"decision.t.{first.id}"]


def test_a_fact_naming_its_trace_is_signed_over_it_and_older_facts_still_verify() -> None:
    traced = decision_fact(
        **DECISION, resolved_by="alice", resolved_at=1_700_000_000.0, signer=SIGNER, trace_id="ab" * 16
    )
    assert f"trace:{'ab' * 16}" in traced.tags and "approval:0123456789abcdef" in traced.tags
    signed = signed_decision(traced.key, traced.tags, "fs.read", "claude", SIGNER)
    assert signed is not None and signed.trace_id == "ab" * 16
    tags = list(traced.tags)
    for what, variant in [
        ("another trace", [t if not t.startswith("trace:") else "trace:" + "cd" * 16 for t in tags]),
        ("the trace removed", [t for t in tags if not t.startswith("trace:")]),
        ("two traces", [*tags, "trace:" + "cd" * 16]),
        ("another approval tag", [t if not t.startswith("approval:") else "approval:fedcba9876543210" for t in tags]),
    ]:
        assert signed_decision(traced.key, variant, "fs.read", "claude", SIGNER) is None, what
    # A fact written before trace ids (domain 1) verifies as it did, and gains nothing from a trace tag added later.
    old = decision_fact(**DECISION, resolved_by="alice", resolved_at=1_700_000_000.0, signer=SIGNER)
    assert not any(t.startswith("trace:") for t in old.tags)
    assert signed_decision(old.key, old.tags, "fs.read", "claude", SIGNER) is not None
    assert signed_decision(old.key, [*old.tags, "trace:" + "ab" * 16], "fs.read", "claude", SIGNER) is None
