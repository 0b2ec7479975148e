"""The published SDK (flux7-memory 0.8.0, `from mem7 import Mem7`) against a real `mem7 serve` process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from mem7 import Mem7
from mem7.client import Mem7Error

from tests.memory.stores import Stores

from .conftest import Mem7Process

pytestmark = pytest.mark.served

TOKEN = "sdk-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, stores: Stores) -> Iterator[Mem7Process]:
    root = tmp_path_factory.mktemp("sdk") / "mem7"
    with Mem7Process(root, token=TOKEN, env=stores.env(root)) as proc:
        yield proc


@pytest.fixture
def m(server: Mem7Process) -> Mem7:
    return Mem7(server.url, token=TOKEN, timeout=10)


def test_store_recall_list_and_forget(m: Mem7) -> None:
    assert m.store("sdk.prefs", "prefers dark mode", tags=["user", "sdk"], agent="claude") == (
        "Memory 'sdk.prefs' created (1 total entries)"
    )
    assert m.store("sdk.prefs", "prefers light mode", tags=["user", "sdk"]).startswith("Memory 'sdk.prefs' updated")
    recalled = m.recall(key="sdk.prefs")
    assert recalled.startswith("## sdk.prefs\nprefers light mode\nTags: user, sdk\nAgent: claude\nUpdated: ")
    assert m.recall(tags=["user", "nope"]) == "No memories found."
    assert m.list(tags=["sdk"]).startswith("1 memories:\n- sdk.prefs [user, sdk] (by claude) — ")
    assert m.forget(key="sdk.prefs") == "Removed 1 memory(ies). 0 remaining."
    assert m.recall(key="sdk.prefs") == "No memories found."


def test_search_context_and_context_block(m: Mem7) -> None:
    m.store("sdk.turn.t001", "we talked about the garden", tags=["conv"])
    m.store("sdk.turn.t002", "she joined the painting group", tags=["conv"])
    m.store("sdk.turn.t003", "on May 7", tags=["conv"])
    text = m.search("when did she join the painting group?")  # the SDK's default mode is natural
    assert text.startswith("1 results (ranked by relevance):\n\n## sdk.turn.t002\n")
    woven = m.search("painting", mode="raw", include_neighbors=True, neighbor_radius=1)
    assert [line for line in woven.splitlines() if line.startswith("## ")] == [
        "## sdk.turn.t001",
        "## sdk.turn.t002",
        "## sdk.turn.t003",
    ]
    memories = m.context("painting group", tags=["conv"], limit=5)
    assert [(x.key, x.value, x.tags) for x in memories] == [
        ("sdk.turn.t002", "she joined the painting group", ["conv"])
    ]
    assert memories[0].tx_to is None and memories[0].valid_from
    assert m.context_block("painting group") == "[sdk.turn.t002]\nshe joined the painting group"
    assert m.context_block("zebra") == ""
    with pytest.raises(Mem7Error, match="query is required"):
        m.search("   ")


def test_get_reads_the_workspace(m: Mem7) -> None:
    m.store("sdk.get", "read me back")
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    text = m.get(f"memory/{day}.md")
    assert "## sdk.get\n" in text and "read me back\n" in text
    assert m.get(f"memory/{day}.md", from_line=2, to_line=2).endswith("\n")
    with pytest.raises(Mem7Error, match="path escapes workspace"):
        m.get("../index.db")


def test_history_and_chain(m: Mem7) -> None:
    m.store("sdk.hist", "v1", agent="scout7")
    m.store("sdk.hist", "v2", valid_from="2026-03-20")
    m.forget(key="sdk.hist", agent="ops")
    events = m.history("sdk.hist")
    assert [(e.what, e.agent) for e in events] == [("store", "scout7"), ("update", "scout7"), ("delete", "ops")]
    assert all(len(e.seal) == 12 for e in events)
    assert events[1].valid.startswith("2026-03-20T00:00:00Z → ")
    chain = m.chain()
    assert chain["holds"] is True and chain["report"]["break"] is None and chain["report"]["sealed"] >= 3


def test_bitemporal_reads_through_the_sdk(m: Mem7) -> None:
    m.store("sdk.event.host", "Hetzner", valid_from="2026-01-01")
    m.store("sdk.event.host", "Cloudflare", valid_from="2026-03-20")
    assert "Hetzner" in m.recall(key="sdk.event.host", valid_at="2026-03-01")
    assert "Cloudflare" in m.recall(key="sdk.event.host")
    assert "sdk.event.host" in m.list(valid_at=datetime(2026, 2, 1, tzinfo=UTC))


def test_health_is_public_and_a_wrong_token_is_refused(server: Mem7Process) -> None:
    assert Mem7(server.url, token="").health() is True
    with pytest.raises(requests.HTTPError, match="401"):
        Mem7(server.url, token="wrong").recall()
    assert Mem7("http://127.0.0.1:1", token="").health() is False


def test_files_are_under_mem7_dir(server: Mem7Process, engine: str) -> None:
    # The index is index.db beside the workspace, or on PostgreSQL (MEM7_DATABASE_URL) in the database alone.
    assert (Path(server.directory) / "index.db").exists() is (engine == "sqlite")
    assert list((Path(server.directory) / "workspace" / "memory").glob("*.md"))
