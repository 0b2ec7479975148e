"""Who holds an outbox lease, and whether that process is provably gone.

A worker that claims a delivery writes its identity beside the lease. When the service is killed (kill -9, OOM)
and started again on the same machine, the new workers see that the holder no longer exists and take the row at
once, instead of waiting out the lease (shared/notify/outbox.py). Only a process on this machine can be proven
gone: the identity names the boot (`/proc/sys/kernel/random/boot_id`), the PID namespace, the PID and the
process's start time (so a reused PID is not mistaken for the holder). A holder on another machine or in another
container, or any identity that cannot be read, is taken to be alive: its lease runs out as before (fail safe: a
doubt never makes two workers deliver at once)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["is_gone", "this_process"]

_PROC = Path("/proc")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None when it is gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses: split after the last ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


@functools.cache
def _machine() -> str | None:
    """This boot and PID namespace, None where /proc does not tell (not Linux)."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat(_PROC / "self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}:{namespace}" if boot else None


def this_process() -> str:
    """This process's identity, as written beside a lease; '' where it cannot be proven (then leases just expire)."""
    return _identity(os.getpid())  # by PID: a forked worker is another process


@functools.cache
def _identity(pid: int) -> str:
    machine = _machine()
    started = _start_time(pid)
    return f"{machine}/{pid}/{started}" if machine and started else ""


def is_gone(claimant: str | None) -> bool:
    """True only when `claimant` ran on this machine and that process no longer exists."""
    machine = _machine()
    if not claimant or machine is None:
        return False
    parts = claimant.rsplit("/", 2)  # machine / pid / start time
    if len(parts) != 3 or parts[0] != machine or not parts[1].isdigit():
        return False
    return _start_time(int(parts[1])) != parts[2]
