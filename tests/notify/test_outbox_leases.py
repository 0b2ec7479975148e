"""A delivery's lease names the process that holds it (shared/notify/claimant.py). A service restarted on the same
machine after a kill takes over a delivery whose holder is gone at once; a living holder, or one this machine cannot
judge, keeps its lease until it runs out. In process over a real SQLite file (PostgreSQL with `--engine=postgresql`);
the holders are real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from flux7.shared.mesh import Mesh
from flux7.shared.notify.claimant import is_gone, this_process
from flux7.shared.notify.outbox import LEASE_SECONDS, NotificationOutbox

pytestmark = pytest.mark.served  # the holders are real processes

IDENTITY = "from flux7.shared.notify.claimant import this_process; print(this_process(), flush=True)"


def _exited_process() -> str:
    """The identity of a process that has run and exited."""
    done = subprocess.run([sys.executable, "-c", IDENTITY], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


@pytest.fixture
def living_process() -> Iterator[str]:
    """The identity of another process that is still running."""
    child = subprocess.Popen(
        [sys.executable, "-c", IDENTITY + "; import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    yield child.stdout.readline().strip()
    child.communicate("", timeout=60)


def test_a_process_that_exited_is_gone_and_a_living_one_is_not(living_process: str) -> None:
    me = this_process()
    assert me and not is_gone(me)
    assert living_process and living_process != me and not is_gone(living_process)
    exited = _exited_process()
    assert exited and is_gone(exited)


def test_a_reused_pid_is_not_taken_for_the_holder_and_what_cannot_be_judged_is_alive() -> None:
    machine, pid, started = this_process().rsplit("/", 2)
    assert is_gone(f"{machine}/{pid}/{int(started) + 1}")  # same PID, another start: the holder is gone
    assert not is_gone(f"another-boot:4026531836/{pid}/{started}")  # another machine or container
    for unreadable in ("", None, "garbage", f"{machine}/not-a-pid/1", f"{machine}/{pid}"):
        assert not is_gone(unreadable)


def _held_by(mesh: Mesh, holder: str) -> NotificationOutbox:
    outbox = NotificationOutbox(mesh.db)
    outbox.add("webhook", "webhook", "a-1", {"id": "msg_a-1_pending", "body": "{}"})
    mesh.db.execute("UPDATE notify_outbox SET claimed_until = ?, claimed_by = ?", (time.time() + LEASE_SECONDS, holder))
    return outbox


def test_a_delivery_whose_holder_was_killed_is_taken_over_at_once(mesh_of: Callable[..., Mesh]) -> None:
    outbox = _held_by(mesh_of(), _exited_process())
    due = outbox.next_due("webhook")
    assert due is not None and due <= time.time()
    item = outbox.claim("webhook")
    assert item is not None and item.approval_id == "a-1"
    [row] = outbox._db.query("SELECT claimed_by, claimed_until FROM notify_outbox")
    assert row[0] == this_process() and float(row[1]) > time.time() + LEASE_SECONDS / 2
    assert outbox.claim("webhook") is None  # now this process holds it, and it is alive


@pytest.mark.parametrize("holder", ["living", "elsewhere", "unknown"])
def test_a_delivery_held_by_a_living_or_unknown_process_waits_for_its_lease(
    mesh_of: Callable[..., Mesh], living_process: str, holder: str
) -> None:
    identity = {"living": living_process, "elsewhere": "another-boot:1/1/1", "unknown": ""}[holder]
    outbox = _held_by(mesh_of(), identity)
    due = outbox.next_due("webhook")
    assert due is not None and due > time.time() + LEASE_SECONDS / 2
    assert outbox.claim("webhook") is None
