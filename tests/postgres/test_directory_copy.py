"""A directory's files shared through one PostgreSQL database (shared/gate/policy_files.py DirectoryCopy), as two
instances on their own disks see them: each writes the other's edits into its directory, an edit of one file
never undoes another instance's edit of a different file, and a removal travels as a `.bak`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux7.shared.gate.policy_files import DirectoryCopy
from flux7.shared.store.db import Database


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    database = Database(postgres_url)
    assert database.engine == "postgresql"
    yield database
    database.close()


def files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file()}


def recorded(db: Database) -> dict[str, str]:
    return {str(n): bytes(c).decode() for n, c in db.query("SELECT name, content FROM catalog_files")}


def test_two_instances_share_one_directory_through_the_database(tmp_path: Path, db: Database) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a.yaml").write_text("a: 1\n")
    (two / "a.yaml").write_text("a: 0\n")  # deployed with an older file
    first = DirectoryCopy(db, one, "catalog_files", "catalog")
    second = DirectoryCopy(db, two, "catalog_files", "catalog")
    assert first.shared and second.shared

    assert first.pull() is False  # nothing recorded yet: the first instance's files become the deployment's
    first.record()
    assert recorded(db) == {"a.yaml": "a: 1\n"}
    assert second.pull() is True  # the later instance takes them, its own kept aside
    assert files(two) == {"a.yaml": "a: 1\n", "a.yaml.bak": "a: 0\n"}
    assert second.pull() is False  # nothing new: no write

    # each instance adds a file before it has seen the other's: both stay
    (one / "b.yaml").write_text("b: 1\n")
    (two / "c.yaml").write_text("c: 1\n")
    first.record()
    second.record()
    assert recorded(db) == {"a.yaml": "a: 1\n", "b.yaml": "b: 1\n", "c.yaml": "c: 1\n"}
    assert first.pull() is True and second.pull() is True
    assert {n: t for n, t in files(one).items() if n.endswith(".yaml")} == recorded(db)
    assert {n: t for n, t in files(two).items() if n.endswith(".yaml")} == recorded(db)

    # a removal on one disk is set aside on the other; so is the last file
    (two / "a.yaml").unlink()
    second.record()
    assert first.pull() is True
    assert files(one) == {"a.yaml.bak": "a: 1\n", "b.yaml": "b: 1\n", "c.yaml": "c: 1\n"}
    (one / "b.yaml").unlink()
    (one / "c.yaml").unlink()
    first.record()
    assert recorded(db) == {}
    assert second.pull() is True
    assert not list(two.glob("*.yaml"))
    assert (two / "c.yaml.bak").read_text() == "c: 1\n"


def test_no_pull_writes_in_the_middle_of_an_edit_and_the_edit_starts_from_the_deployments_files(
    tmp_path: Path, db: Database
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first = DirectoryCopy(db, one, "catalog_files", "catalog")
    second = DirectoryCopy(db, two, "catalog_files", "catalog")
    (one / "a.yaml").write_text("a: 1\n")
    first.record()
    reloaded: list[str] = []
    with second.editing(lambda: reloaded.append("reload")):
        assert reloaded == ["reload"] and files(two) == {"a.yaml": "a: 1\n"}  # taken before the edit
        (one / "b.yaml").write_text("b: 1\n")
        first.record()
        looked: list[bool] = []
        other = threading.Thread(target=lambda: looked.append(second.poll()))
        other.start()
        other.join(10)
        assert looked == [False] and not (two / "b.yaml").exists()  # another thread's look skips, unblocked
        (two / "c.yaml").write_text("c: 1\n")
        second.record()
    assert recorded(db) == {"a.yaml": "a: 1\n", "b.yaml": "b: 1\n", "c.yaml": "c: 1\n"}  # b outlives c's record
    assert second.poll() is True
    assert files(two) == recorded(db)
