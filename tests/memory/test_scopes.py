"""Scopes (CONTRACT 2.6): an identified agent reads its own memories and the owners granted to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.memory.scopes import go_path_match
from flux7.shared.memory.service import MemoryService

from .conftest import call


@pytest.fixture
def scoped(make_service: Any, tmp_path: Path) -> MemoryService:
    scopes = tmp_path / "scopes.json"
    scopes.write_text(json.dumps({"read": {"sup7": ["scout*"], "claude": ["*"]}, "admin": ["claude"]}))
    service: MemoryService = make_service(scopes_file=str(scopes))
    for agent in ("scout7", "sup7", "bob"):
        as_agent(service, agent, "memory_store", key=f"{agent}.note", value=f"note by {agent}", tags=["n"])
    return service


def as_agent(service: MemoryService, agent: str, tool: str, **arguments: Any) -> tuple[str, bool]:
    return service.call_tool(tool, arguments, authenticated=True, meta={"art.flux7/agent": agent})


def test_path_match_globs_stop_at_slashes() -> None:
    assert go_path_match("scout*", "scout7") and not go_path_match("scout*", "scout/7")
    assert go_path_match("a?c", "abc") and go_path_match("[a-c]x", "bx") and not go_path_match("[^a-c]x", "bx")
    assert not go_path_match("[", "[")  # a malformed pattern matches nothing


def test_an_agent_reads_its_own_and_the_owners_granted(scoped: MemoryService) -> None:
    listed, _ = as_agent(scoped, "sup7", "memory_list")
    assert listed.startswith("2 memories:") and "scout7.note" in listed and "bob.note" not in listed
    found, _ = as_agent(scoped, "bob", "memory_search", query="note")
    assert found.startswith("1 results") and "## bob.note" in found
    assert as_agent(scoped, "bob", "memory_recall", key="scout7.note") == ("No memories found.", False)
    assert "3 memories" in as_agent(scoped, "claude", "memory_list")[0]  # admin
    assert "3 memories" in call(scoped, "memory_list")  # no identity: not scoped


def test_scope_escapes_are_refused(scoped: MemoryService) -> None:
    assert as_agent(scoped, "bob", "memory_forget", key="scout7.note") == (
        "scope: bob may not forget memories of scout7",
        True,
    )
    assert as_agent(scoped, "bob", "memory_forget", tags=["n"]) == (
        "scope: bob may not forget by tags (admin only)",
        True,
    )
    assert as_agent(scoped, "bob", "memory_get", path="memory") == (
        "scope: bob may not read workspace files (admin only)",
        True,
    )
    assert as_agent(scoped, "bob", "memory_store", key="scout7.note", value="mine now") == (
        "scope: bob may not overwrite memories of scout7",
        True,
    )
    assert as_agent(scoped, "bob", "memory_history", key="scout7.note") == ("No history.", False)
    assert "note by scout7" in call(scoped, "memory_recall", key="scout7.note")  # untouched


def test_an_agent_forgets_its_own_and_an_admin_forgets_anything(scoped: MemoryService) -> None:
    assert as_agent(scoped, "bob", "memory_forget", key="bob.note")[0] == "Removed 1 memory(ies). 2 remaining."
    assert as_agent(scoped, "claude", "memory_forget", tags=["n"])[0] == "Removed 2 memory(ies). 0 remaining."


def test_an_unvouched_identity_is_not_scoped(scoped: MemoryService) -> None:
    text, _ = scoped.call_tool("memory_list", {}, authenticated=False, meta={"art.flux7/agent": "bob"})
    assert text.startswith("3 memories")


def test_a_bad_scopes_file_stops_the_start(make_service: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"read": {"a": "not-a-list"}}')
    with pytest.raises(ConfigError, match=r"bad\.json"):
        make_service(scopes_file=str(bad))
