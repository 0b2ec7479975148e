"""The service's state is its owner's alone: folders it creates are 0700 and files 0600.

The database (its WAL and shared-memory files take the database file's mode), the trace files, the decision key,
the admin token and the memory workspace can hold secrets and every agent's arguments. Folders that already exist
keep the mode their owner gave them."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "private_dir", "private_file", "write_private"]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: str | Path) -> Path:
    """`mkdir -p` with every folder it creates 0700 (Path.mkdir gives its parents the default mode)."""
    path = Path(path)
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    return path


def private_file(path: str | Path) -> None:
    """Create `path` empty and 0600 when it does not exist yet (SQLite then keeps that mode for the WAL)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))


def write_private(path: str | Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write `data` to a 0600 file (replacing its content; with `exclusive`, FileExistsError if it exists)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    with os.fdopen(os.open(path, flags, PRIVATE_FILE), "wb") as fh:
        fh.write(data)
