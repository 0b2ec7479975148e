"""What `flux7 serve` tells its operator: the console's URL on start, then one access-log line per request."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support.http import wait_until
from tests.support.server import start_server, stop_server

pytestmark = pytest.mark.served


def test_serve_prints_the_console_url_and_an_access_log_line_per_request(tmp_path: Path, engine_env: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("storage_path: flux7.db\nmemory: {enabled: false}\n")
    server = start_server(cfg)
    try:
        httpx.get(f"{server.url}/health?probe=1", timeout=5, trust_env=False)
        wait_until(lambda: '"GET /health' in server.log.read_text(), timeout=30)
        log = server.log.read_text()
        assert re.search(rf"console: {re.escape(server.url)}/console/#token=\S+", log), log
        line = next(x for x in log.splitlines() if '"GET /health' in x)
        assert re.search(r'127\.0\.0\.1 - "GET /health\S* HTTP/1\.1" 200 [\d.]+$', line), line
    finally:
        stop_server(server)


def test_no_access_log_turns_it_off(tmp_path: Path, engine_env: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("storage_path: flux7.db\nmemory: {enabled: false}\naccess_log: false\n")
    server = start_server(cfg)
    try:
        for _ in range(3):
            assert httpx.get(f"{server.url}/health", timeout=5, trust_env=False).status_code == 200
    finally:
        stop_server(server)
    assert "flux7: serving" in server.log.read_text()
    assert '"GET /health' not in server.log.read_text()
