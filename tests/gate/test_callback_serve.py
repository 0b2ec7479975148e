"""X-Callback-URL through a real `flux7 serve` process (issue 13.4): a callback to an address that is not
globally routable is refused when the call is made, with the reason, and nothing is queued; an operator who
allows a network (here loopback, for a local receiver) gets callbacks delivered there."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.http import serve_json, wait_until
from tests.support.server import running_server

from .servers import AGENT, blocked_call, pending, write_config

pytestmark = pytest.mark.served

REFUSED = {
    "http://100.100.100.200/latest/meta-data": "100.100.100.200 is not globally routable (shared address space",
    "http://100.64.0.1/cb": "(shared address space 100.64.0.0/10)",
    "http://[2002:7f00:1::]:9090/cb": "(6to4 for 127.0.0.1: loopback)",
    "http://[::ffff:127.0.0.1]:9090/cb": "(IPv4-mapped for 127.0.0.1: loopback)",
    "http://[64:ff9b::7f00:1]:9090/cb": "(NAT64 for 127.0.0.1: loopback)",
    "http://0x7f.1:9090/cb": "0x7f.1 reads as 127.0.0.1",
    "http://2130706433:9090/cb": "2130706433 reads as 127.0.0.1",
    "http://169.254.169.254/latest/meta-data": "(link-local)",
    "http://[fd00::1]/cb": "(private or special-purpose)",
    "http://localhost:9090/cb": "localhost resolves to",
    "file:///etc/passwd": "scheme 'file' is not http or https",
}


def test_a_call_with_a_refused_callback_url_is_a_400_naming_why(tmp_path: Path) -> None:
    with running_server(write_config(tmp_path)) as server:
        for url, why in REFUSED.items():
            r = httpx.post(
                f"{server.url}/tool/echo.run",
                json={"args": ["x"]},
                headers={**AGENT, "X-Callback-URL": url},
                timeout=10,
            )
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"].startswith("X-Callback-URL refused: "), url
            assert why in r.json()["error"], (url, r.json())
        assert httpx.get(f"{server.url}/approvals", timeout=5).json() == []  # nothing was queued
        log = server.log.read_text()
    assert "X-Callback-URL http://100.100.100.200/latest/meta-data from bot refused" in log


@pytest.mark.parametrize("allowed", [True, False])
def test_a_callback_reaches_a_loopback_receiver_only_when_the_operator_allows_loopback(
    tmp_path: Path, allowed: bool
) -> None:
    extra = {"outbound": {"allow_networks": ["127.0.0.1/32"]}} if allowed else {}
    with serve_json(lambda *_: (200, {})) as (receiver, heard), running_server(write_config(tmp_path, **extra)) as s:
        call = blocked_call(s.url, "cb", **{"X-Callback-URL": f"{receiver}/done"})
        if not allowed:
            assert call.result(timeout=20).status_code == 400
            return
        (approval,) = pending(s.url, 1)
        assert httpx.post(f"{s.url}/approvals/{approval['id']}/approve", json={"resolved_by": "cli:ops"}).is_success
        assert call.result(timeout=20).status_code == 200
        wait_until(lambda: len(heard) == 1, timeout=10)
    body = json.loads(heard[0]["body"])
    assert heard[0]["path"] == "/done"
    assert body["event"] == "approved" and body["id"] == approval["id"] and body["resolved_by"] == "cli:ops"
