"""Real server processes on loopback: granian workers sharing one SQLite file, kill -9, restart.

What these prove needs processes: a call blocked in one process is released by a resolution made in another;
acknowledged approvals, grants and stops survive SIGKILL; timeouts are re-derived after a restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.http import wait_until

from .servers import AGENT, Server, blocked_call, pending, write_config

pytestmark = pytest.mark.served


def test_a_call_blocked_in_one_process_is_released_by_a_resolve_in_another(
    tmp_path: Path, servers: list[Server]
) -> None:
    config = write_config(tmp_path)
    a, b = Server(config, workers=1).start(), Server(config, workers=1).start()
    servers += [a, b]
    call = blocked_call(a.url, "cross")
    (approval,) = pending(b.url, 1)
    started = time.perf_counter()
    r = httpx.post(f"{b.url}/approvals/{approval['id']}/approve", json={"resolved_by": "cli:ops"})
    assert r.status_code == 200
    res = call.result(timeout=10)
    assert time.perf_counter() - started < 1.0
    assert res.status_code == 200 and res.json()["result"]["stdout"] == "cross\n"


def test_two_workers_release_every_blocked_call_with_its_own_decision(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(write_config(tmp_path), workers=2).start()
    servers.append(server)
    calls = {f"c{i}": blocked_call(server.url, f"c{i}") for i in range(6)}
    listed = pending(server.url, 6)
    decisions: dict[str, str] = {}
    for i, a in enumerate(listed):
        decision = "approve" if i % 2 else "deny"
        decisions[a["params"]["args"][0]] = decision
        # a fresh connection each time: granian hands it to either worker
        assert httpx.post(f"{server.url}/approvals/{a['id']}/{decision}", timeout=5).status_code == 200
    for arg, future in calls.items():
        res = future.result(timeout=20)
        assert res.status_code == (200 if decisions[arg] == "approve" else 403), arg


def resolve_together(url: str, approval_id: str) -> list[int]:
    barrier = threading.Barrier(2)
    codes: list[int] = []

    def resolve(decision: str) -> None:
        barrier.wait()
        codes.append(httpx.post(f"{url}/approvals/{approval_id}/{decision}", timeout=10).status_code)

    threads = [threading.Thread(target=resolve, args=(d,)) for d in ("approve", "deny")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return codes


def test_concurrent_resolves_over_http_have_one_200_and_one_409(tmp_path: Path, servers: list[Server]) -> None:
    server = Server(write_config(tmp_path), workers=2).start()
    servers.append(server)
    for round_ in range(4):
        call = blocked_call(server.url, f"r{round_}")
        (approval,) = pending(server.url, 1)
        codes = resolve_together(server.url, approval["id"])
        assert sorted(codes) == [200, 409]
        call.result(timeout=20)


def test_kill_9_keeps_pending_approvals_grants_and_stops(tmp_path: Path, servers: list[Server]) -> None:
    config = write_config(tmp_path)
    first = Server(config, workers=2).start()
    servers.append(first)
    grant = httpx.post(f"{first.url}/grants", json={"agent": "bot", "tools": "fs.*", "duration": "1h"}).json()
    halt = httpx.post(f"{first.url}/halts", json={"scope": "session", "target": "s-9", "reason": "x"}).json()
    call = blocked_call(first.url, "survivor")
    (approval,) = pending(first.url, 1)
    first.kill9()
    with pytest.raises(httpx.HTTPError):
        call.result(timeout=20)  # the connection died with the worker

    second = Server(config, workers=2).start()
    servers.append(second)
    (after,) = httpx.get(f"{second.url}/approvals").json()
    assert after["id"] == approval["id"] and after["status"] == "pending"
    assert after["remaining"].endswith("s") and after["remaining"] != "0s"
    assert [g["id"] for g in httpx.get(f"{second.url}/grants").json()] == [grant["id"]]
    assert [h["id"] for h in httpx.get(f"{second.url}/halts").json()] == [halt["halt"]["id"]]
    assert httpx.post(f"{second.url}/approvals/{approval['id'][:6]}/approve").status_code == 200
    assert httpx.get(f"{second.url}/approvals/{approval['id']}").json()["status"] == "approved"
    stopped = httpx.post(f"{second.url}/tool/echo.run", json={"args": ["x"]}, headers={**AGENT, "X-Session-Id": "s-9"})
    assert stopped.status_code == 403 and stopped.json()["policy"] == "halted"


def test_an_approval_left_by_a_killed_server_times_out_after_the_restart(tmp_path: Path, servers: list[Server]) -> None:
    config = write_config(tmp_path, approval={"timeout_seconds": 1})
    first = Server(config, workers=1).start()
    servers.append(first)
    call = blocked_call(first.url, "orphan")
    (approval,) = pending(first.url, 1)
    first.kill9()
    with pytest.raises(httpx.HTTPError):
        call.result(timeout=20)
    second = Server(config, workers=1).start()
    servers.append(second)

    def timed_out() -> bool:
        got = httpx.get(f"{second.url}/approvals/{approval['id']}").json()
        return got["status"] == "timeout" and got["resolved_by"] == "system:timeout"

    wait_until(timed_out, timeout=10)
