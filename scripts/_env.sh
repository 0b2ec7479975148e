# Sourced by scripts/serve and scripts/test: a virtual environment at .venv with flux7 installed (editable).
# Debian's system Python refuses `pip install` outside a venv (externally-managed-environment), so every
# command runs inside .venv. Set FLUX7_VENV to use another location.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLUX7_VENV:-$REPO/.venv}"
PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

apt_install() {
  # Installs Debian packages when this user may (root); otherwise says what to install and stops.
  if [ "$(id -u)" -ne 0 ]; then
    echo "flux7: missing $*; install with: sudo apt-get install -y $*" >&2
    exit 1
  fi
  if [ -z "${_FLUX7_APT_UPDATED:-}" ]; then
    apt-get update -qq
    _FLUX7_APT_UPDATED=1
  fi
  apt-get install -y -qq "$@" >/dev/null
}

ensure_venv() {
  # $1: the pip extras spec to install, e.g. "." or ".[dev]"
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    apt_install python3 python3-venv
  fi
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "flux7: needs Python 3.11 or newer; $PYTHON is $("$PYTHON" --version 2>&1)" >&2
    exit 1
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
      rm -rf "$VENV"
      apt_install python3-venv
      "$PYTHON" -m venv "$VENV"
    fi
  fi
  # Reinstall only when pyproject.toml changed since the last install (a stamp per extras spec).
  local stamp="$VENV/.flux7-installed-$(echo "$1" | tr -c 'a-z0-9' '_')"
  if [ ! -f "$stamp" ] || [ "$REPO/pyproject.toml" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    (cd "$REPO" && "$VENV/bin/python" -m pip install -q -e "$1")
    touch "$stamp"
  fi
  export PATH="$VENV/bin:$PATH"
}

ensure_postgresql() {
  # The PostgreSQL tests start a throwaway cluster from the installed binaries unless FLUX7_TEST_DATABASE_URL
  # names a server. Installs Debian's postgresql (and pgvector where the distribution has it) when missing.
  if [ -n "${FLUX7_TEST_DATABASE_URL:-}" ] || command -v initdb >/dev/null 2>&1 \
    || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "flux7: the PostgreSQL tests need a server: sudo apt-get install -y postgresql, or set FLUX7_TEST_DATABASE_URL" >&2
    return 0
  fi
  apt_install postgresql
  local major
  major="$(ls /usr/lib/postgresql | sort -n | tail -1)"
  if apt-cache show "postgresql-$major-pgvector" >/dev/null 2>&1; then
    apt_install "postgresql-$major-pgvector"
  fi
  # Debian starts a cluster of its own on install; the tests start theirs on a free port, so it may stay down.
}
