"""Every walk-through runs as written, from the README's state.

A fenced `sh` block preceded by the line `<!-- doc-test -->` is runnable. For each page with such blocks: a copy of
the checkout's example config, policies and catalog (tests/support/checkout.py), a new terminal's environment with
a home of its own, and `flux7 serve --config config.example.yaml` started there as `scripts/serve` starts it; then
one bash script runs the README's runnable blocks and the page's, in order (`set -e`: a failing command fails the
page). The only changes to the text are the port (`localhost:9090` becomes the test server's; `MESH_URL` says the
same to the CLIs) and a `curl` that fails on a 401 or a 5xx, which no walk-through shows on purpose. The checkout's
`.venv` is the test interpreter's, so `source .venv/bin/activate` is what puts the commands on PATH."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.checkout import readme_checkout, terminal_env
from tests.support.http import free_port
from tests.support.server import REPO, healthy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.served

MARK = "<!-- doc-test -->"
PAGES = ["README.md", "docs/approvals.md", "docs/governance.md", "docs/mcp.md", "docs/memory.md", "docs/cli.md"]

# 401 means a credential the walk-through promised did not work; 5xx a server fault. Both fail the page.
CURL = r"""
curl() {
  local out code
  out=$(command curl -sS -w '\n%{http_code}' "$@") || return
  code=${out##*$'\n'}
  printf '%s\n' "${out%$'\n'*}"
  if [ "$code" = 401 ] || [ "${code:0:1}" = 5 ]; then echo "doc-test: HTTP $code from: curl $*" >&2; return 1; fi
}
"""


def runnable_blocks(page: Path) -> list[str]:
    lines = page.read_text().splitlines()
    blocks: list[str] = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        assert lines[i + 1].strip() == "```sh", f"{page}:{i + 1}: {MARK} must come right before a ```sh fence"
        end = lines.index("```", i + 2)
        blocks.append("\n".join(lines[i + 2 : end]))
    return blocks


def test_each_walk_through_page_marks_its_runnable_blocks() -> None:
    for name in PAGES:
        assert runnable_blocks(REPO / name), f"{name} has no {MARK} block"


def _venv(checkout: Path) -> None:
    """The checkout's `.venv`: the test interpreter's environment (a stand-in `activate` when it has none)."""
    prefix = Path(sys.prefix)
    if (prefix / "bin" / "activate").is_file():
        (checkout / ".venv").symlink_to(prefix)
    else:
        (checkout / ".venv" / "bin").mkdir(parents=True)
        scripts = Path(sys.executable).parent
        (checkout / ".venv" / "bin" / "activate").write_text(f'export PATH="{scripts}:$PATH"\n')


@pytest.fixture
def readme_server(tmp_path: Path) -> Iterator[tuple[Path, int, dict[str, str]]]:
    port = free_port()
    checkout = readme_checkout(tmp_path, port)
    _venv(checkout)
    env = terminal_env(tmp_path / "home")
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if p != scripts)  # until the block activates .venv
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", "config.example.yaml"],
        cwd=checkout,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or healthy(url), timeout=60, what="the README's server")
        assert proc.poll() is None, log.read_text()
        yield checkout, port, {**env, "MESH_URL": f"http://localhost:{port}"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


@pytest.mark.parametrize("page", PAGES)
def test_the_walk_through_runs_as_written(page: str, readme_server: tuple[Path, int, dict[str, str]]) -> None:
    checkout, port, env = readme_server
    blocks = runnable_blocks(REPO / "README.md") + ([] if page == "README.md" else runnable_blocks(REPO / page))
    script = "\n".join(["set -euo pipefail", CURL, *blocks])
    script = re.sub(r"\b(localhost|127\.0\.0\.1):9090\b", rf"\g<1>:{port}", script)
    done = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{page}:\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
