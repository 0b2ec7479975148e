"""Bitemporal reads (CONTRACT 2.7): valid_at is world time, as_of is belief time."""

from __future__ import annotations

from flux7.shared.memory.service import MemoryService

from .conftest import Clock, call, fail


def values(text: str) -> list[str]:
    lines = text.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line.startswith("## ")]


def test_a_past_valid_from_corrects_history_and_keeps_what_held_before(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="host", value="Hetzner", valid_from="2026-01-01")
    clock.advance(60)
    call(service, "memory_store", key="host", value="Cloudflare", valid_from="2026-03-20")
    assert values(call(service, "memory_recall", key="host")) == ["Cloudflare"]
    assert values(call(service, "memory_recall", key="host", valid_at="2026-03-01")) == ["Hetzner"]
    assert values(call(service, "memory_recall", key="host", valid_at="2025-12-31")) == []
    # before the correction mem7 believed Hetzner held on 2026-04-01
    assert values(call(service, "memory_recall", key="host", valid_at="2026-04-01", as_of="2026-09-21T14:13:30Z")) == [
        "Hetzner"
    ]


def test_a_closed_validity_leaves_the_rest_of_the_older_version(service: MemoryService) -> None:
    call(service, "memory_store", key="office", value="Paris", valid_from="2026-01-01")
    call(service, "memory_store", key="office", value="Lyon", valid_from="2026-05-01", valid_to="2026-06-01")
    assert values(call(service, "memory_recall", key="office", valid_at="2026-04-30")) == ["Paris"]
    assert values(call(service, "memory_recall", key="office", valid_at="2026-05-15")) == ["Lyon"]
    assert values(call(service, "memory_recall", key="office", valid_at="2026-07-01")) == ["Paris"]
    assert call(service, "memory_list", valid_at="2026-05-15").startswith("1 memories:\n- office")


def test_forget_is_a_change_of_belief_that_as_of_can_look_behind(service: MemoryService, clock: Clock) -> None:
    call(service, "memory_store", key="k", value="v", tags=["t"])
    clock.advance(60)
    call(service, "memory_forget", key="k")
    assert call(service, "memory_recall", key="k") == "No memories found."
    assert values(call(service, "memory_recall", key="k", as_of="2026-09-21T14:13:30Z")) == ["v"]
    assert "k" in call(service, "memory_search", query="v", as_of="2026-09-21T14:13:30Z")
    context = call(service, "memory_context", query="v", as_of="2026-09-21T14:13:30Z")
    assert '"tx_to":"2026-09-21T14:14:20Z"' in context


def test_future_validity_is_not_in_force_yet(service: MemoryService) -> None:
    call(service, "memory_store", key="plan", value="now")
    call(service, "memory_store", key="plan", value="later", valid_from="2030-01-01")
    assert values(call(service, "memory_recall", key="plan")) == ["now"]
    assert values(call(service, "memory_recall", key="plan", valid_at="2030-06-01")) == ["later"]


def test_bad_moments_are_refused(service: MemoryService) -> None:
    assert fail(service, "memory_store", key="k", value="v", valid_from="yesterday") == (
        "invalid valid_from: yesterday (want YYYY-MM-DD or RFC3339)"
    )
    assert fail(service, "memory_store", key="k", value="v", valid_from="2026-05-01", valid_to="2026-04-01") == (
        "valid_to must be after valid_from"
    )
    assert fail(service, "memory_recall", as_of="2026-13-01").startswith("invalid as_of")
