"""A web page on another origin cannot drive `flux7 serve` through the browser (issue 13, item 2), and the
start-up line's console link signs the console in with the generated admin token.

A real `flux7 serve` (default auth: the generated admin token; and `auth.open_loopback`, where the browser guard
alone stands between the page and the control plane) and a page served by a second HTTP server on another
loopback port, loaded in Debian's Chromium through console-spa/e2e/crosssite.e2e.mjs. The page sends what a
browser sends without a preflight: `fetch(…, {method: "POST", mode: "no-cors", Content-Type: text/plain})`
to create a grant for "*", call a tool and write memory. The server side is checked here: no grant, no
upstream call, no memory entry, no trace; and the server's log names each refusal (so the requests did
arrive and were refused by the guard, not lost on the way).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_console import CHROMIUM, CONSOLE, browser_installed  # noqa: F401  (fails without a browser)
from tests.functions.conftest import make_config
from tests.support.http import free_port
from tests.support.server import Server, running_server
from tests.upstreams.servers.http_backend import Backend

SCRIPT = CONSOLE / "e2e" / "crosssite.e2e.mjs"
MARKER = "cross-site-was-here"

ATTACK = """<!doctype html><meta charset="utf-8"><title>not flux7</title>
<script>
const target = %(target)s;
const attacks = [
  ["grant", "/grants", JSON.stringify({agent: "*", tools: "*", duration: "24h"})],
  ["tool", "/tool/create_pet", JSON.stringify({params: {name: %(marker)s}})],
  ["memory", "/rpc", JSON.stringify({jsonrpc: "2.0", id: 1, method: "tools/call",
    params: {name: "memory_store", arguments: {key: "xsite.note", value: %(marker)s}}})],
  ["mcp", "/mcp", JSON.stringify({jsonrpc: "2.0", id: 1, method: "initialize", params: {}})],
];
(async () => {
  const out = [];
  for (const [name, path, body] of attacks) {
    try {
      const headers = {"Content-Type": "text/plain"};
      const r = await fetch(target + path, {method: "POST", mode: "no-cors", headers, body});
      out.push({name, sent: true, type: r.type});
    } catch (e) {
      out.push({name, sent: false, error: String(e)});
    }
  }
  window.__attack = out;
})();
</script>
"""


@pytest.fixture
def attack_site(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A plain static HTTP server on another loopback port: the attacker's site."""
    root = tmp_path / "site"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def browse(scenario: str, page: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(SCRIPT), scenario, "--page", page], capture_output=True, text=True, cwd=CONSOLE, timeout=120
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{scenario}: no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert proc.returncode == 0 and report["ok"], f"{scenario} failed in the browser: {report}\n{proc.stderr[-4000:]}"
    return report


def config(tmp_path: Path, backend: Backend, auth: str) -> Path:
    cfg = make_config(tmp_path, backend, f"auth: {auth}\n")
    cfg.write_text(cfg.read_text().replace("memory: {enabled: false}", "memory: {enabled: true, hybrid: false}"))
    return cfg


def admin_headers(tmp_path: Path, open_loopback: bool) -> dict[str, str]:
    if open_loopback:
        return {}
    return {"Authorization": f"Bearer {(tmp_path / 'flux7-admin.token').read_text().strip()}"}


def memory_text(server: Server, headers: dict[str, str]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}}
    r = httpx.post(f"{server.url}/rpc", json=body, headers=headers, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text
    return json.dumps(r.json())


@pytest.mark.parametrize("open_loopback", [False, True], ids=["default", "open_loopback"])
@pytest.mark.parametrize("page_host", ["127.0.0.1", "localhost"], ids=["same-site", "cross-site"])
def test_a_page_on_another_origin_creates_no_grant_runs_no_tool_writes_no_memory(
    tmp_path: Path,
    backend: Backend,
    attack_site: tuple[Path, int],
    open_loopback: bool,
    page_host: str,
    engine_configs: str,
) -> None:
    auth = "{open_loopback: true}" if open_loopback else "{require_authentication: false}"
    with running_server(config(tmp_path, backend, auth)) as server:
        headers = admin_headers(tmp_path, open_loopback)
        root, port = attack_site
        (root / "attack.html").write_text(
            ATTACK % {"target": json.dumps(server.url), "marker": json.dumps(MARKER)}, encoding="utf-8"
        )
        report = browse("attack", f"http://{page_host}:{port}/attack.html")

        # The browser did send every request (no-cors answers are opaque, so the page cannot tell more) ...
        assert report["origin"] == f"http://{page_host}:{port}"
        assert [(f["name"], f["sent"], f.get("type")) for f in report["fetches"]] == [
            (name, True, "opaque") for name in ("grant", "tool", "memory", "mcp")
        ]
        # ... the guard refused each one, with the Sec-Fetch-Site Chromium sent ...
        site = "same-site" if page_host == "127.0.0.1" else "cross-site"
        log = server.log.read_text(errors="replace")
        for path in ("/grants", "/tool/create_pet", "/rpc", "/mcp"):
            assert re.search(
                rf"refused POST {re.escape(path)} from 127\.0\.0\.1: cross-site request refused "
                rf"\(Sec-Fetch-Site: {site}\)",
                log,
            ), (path, log[-3000:])
        # ... and nothing happened: no grant, no upstream call, no memory entry, no trace of a call.
        grants = httpx.get(f"{server.url}/grants", headers=headers, timeout=10, trust_env=False)
        assert grants.status_code == 200 and grants.json() == []
        assert backend.requests == []
        traces = httpx.get(f"{server.url}/traces", headers=headers, timeout=10, trust_env=False)
        assert traces.status_code == 200 and [t for t in traces.json() if t.get("tool") == "create_pet"] == []
        assert MARKER not in memory_text(server, headers)


def test_the_startup_link_signs_the_console_in_and_leaves_no_token_in_the_address_bar(
    tmp_path: Path, backend: Backend
) -> None:
    with running_server(config(tmp_path, backend, "{require_authentication: false}")) as server:
        token = (tmp_path / "flux7-admin.token").read_text().strip()
        log = server.log.read_text(errors="replace")
        found = re.search(r"console: (http://\S+/console/#token=(\S+))", log)
        assert found, log[-2000:]
        assert found.group(2) == token and found.group(1).startswith(server.url)
        report = browse("console-link", found.group(1))
    assert report["stored_token"] == token
    assert token not in report["after_load"] and report["after_load"].endswith("/console/#/")
    assert report["refused"] == []  # every request carried the token
    assert "Grants" in report["main"]
