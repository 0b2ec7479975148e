"""The suite's markers, set where they can be derived and checked where they cannot (CONTRIBUTING.md, "Tests").

- `served`: the test starts a real process (a flux7/mesh7/mem7/sup7 server or command, an upstream or model server
  as a script, node, a PostgreSQL cluster, Litestream, an OpenTelemetry collector, worker processes). The in-process
  pass is `-m "not served"`.
- `browser`: it drives Chromium (console-spa/e2e/*.e2e.mjs through playwright-core); always `served` too.
- `postgresql`: it needs a PostgreSQL server; always `served` too (the cluster is a process the session starts).
  On `--engine=postgresql` every test whose store the engine selects needs one.
- `slow`: one test that takes seconds on its own (a wheel build, a fuzz run, mypy).

Marks come from three places: the fixtures a test uses (`POSTGRESQL_FIXTURES`, `BROWSER_FIXTURES`), the engine
(`--engine=postgresql`), and explicit `pytest.mark.served` on the test or its module. The explicit ones are checked
as the suite runs: a test that starts such a process without `served` (or, for a PostgreSQL cluster, `postgresql`)
fails, naming the command, so `-m "not served"` stays a pass that starts nothing.
"""

from __future__ import annotations

import multiprocessing.process
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = ["ENGINE_FIXTURES", "ProcessAudit", "kind_of", "mark_items"]

# A test whose fixtures include one of these needs a PostgreSQL server (tests/conftest.py starts a cluster).
POSTGRESQL_FIXTURES = frozenset({"postgres_admin_url", "pgvector_admin_url", "postgres_url"})
# tests/e2e/test_console.py's module-wide check that node, Chromium and playwright-core are there.
BROWSER_FIXTURES = frozenset({"browser_installed"})
# A test whose store the engine selects: it runs in both passes, on SQLite and on `--engine=postgresql`.
ENGINE_FIXTURES = frozenset({"engine"})

_REPO = Path(__file__).resolve().parents[2]
_SERVERS = frozenset({"node", "npm", "npx", "granian", "litestream", "rotel", "flux7", "mesh7", "mem7", "sup7", "mesh"})
_POSTGRESQL = frozenset({"initdb", "pg_ctl", "postgres"})
_LINTERS = frozenset({"ruff", "mypy"})  # short-lived tools run by tests/test_quality.py (`slow`, not `served`)


def kind_of(argv: Sequence[str]) -> str | None:
    """What starting `argv` makes a test: "browser", "postgresql", "served", or None for a short command-line tool
    (echo, ls, git, bwrap: the subject of in-process tests of CLI upstreams and the agent's sandbox)."""
    if not argv:
        return None
    exe = Path(argv[0]).name
    if any(a.endswith(".e2e.mjs") for a in argv) or "chrom" in exe:
        return "browser"
    if exe in _POSTGRESQL:
        return "postgresql"
    if exe.startswith("python") or argv[0] == sys.executable:
        if len(argv) > 2 and argv[1] == "-m" and argv[2] in _LINTERS:
            return None
        return "served"
    if exe in _SERVERS or exe == "multiprocessing":
        return "served"
    script = Path(argv[1]) if len(argv) > 1 and not argv[1].startswith("-") else None
    if exe in ("sh", "bash", "dash") and script is not None and script.resolve().is_relative_to(_REPO):
        return "served"  # one of the repository's scripts (deploy/entrypoint.sh): it starts the server
    return None


def mark_items(items: Iterable[pytest.Item], engine: str) -> None:
    """Derived marks: by fixture, by engine, and `served` under `browser` and `postgresql`."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & BROWSER_FIXTURES:
            item.add_marker(pytest.mark.browser)
        if names & POSTGRESQL_FIXTURES or (engine == "postgresql" and names & ENGINE_FIXTURES):
            item.add_marker(pytest.mark.postgresql)
        if (item.get_closest_marker("browser") or item.get_closest_marker("postgresql")) and not (
            item.get_closest_marker("served")
        ):
            item.add_marker(pytest.mark.served)


class ProcessAudit:
    """Records the processes started while a test runs (its setup, call and teardown), from every thread: the
    `subprocess.Popen` audit event (asyncio's subprocesses raise it too) and multiprocessing's Process.start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: list[list[str]] = []
        self._on = False
        sys.addaudithook(self._hook)
        original = multiprocessing.process.BaseProcess.start

        def start(process: Any) -> None:
            target = getattr(process, "_target", None)
            self._record(["multiprocessing", getattr(target, "__qualname__", repr(target))])
            original(process)

        multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "subprocess.Popen" and self._on:
            argv = args[1]
            self._record([str(a) for a in argv] if isinstance(argv, list | tuple) else [str(argv)])

    def _record(self, argv: list[str]) -> None:
        if self._on:
            with self._lock:
                self._started.append(argv)

    def begin(self) -> None:
        with self._lock:
            self._started = []
        self._on = True

    def started(self) -> list[list[str]]:
        with self._lock:
            return list(self._started)

    def end(self) -> None:
        self._on = False

    @staticmethod
    def unmarked(item: pytest.Item, started: list[list[str]]) -> list[str]:
        """The commands `item` started that its marks do not cover."""
        marks = {m.name for m in item.iter_markers()}
        return [
            f"{kind}: {' '.join(argv)[:240]}"
            for argv in started
            if (kind := kind_of(argv)) is not None and kind not in marks
        ]
