"""Bad policy files, uploaded or dropped into policy_dir, on a real `flux7 serve`: a clear 400, nothing written,
the last good set kept, and a start that refuses them with the file and the fault named."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flux7.shared.safe_yaml import MAX_DEPTH, MAX_POLICY_BYTES
from tests.functions.conftest import ADMIN, AGENT, make_config
from tests.support.http import wait_until
from tests.support.server import REPO, Server, running_server
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

DEEP_FLOW = b"name: deep\nrules: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
DEEP_BLOCK = b"name: deep\nrules:\n" + b"".join(b"  " * i + b"- x:\n" for i in range(1, 200))
LAUGHS = b"name: laughs\nrules: []\n" + b"".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n".encode() for i in range(1, 9)
).replace(b"*l0", b"lol")

BAD_UPLOADS = {
    "invalid UTF-8": (b"name: bad\xff\xfe\nrules: []\n", "(encoding)", "UTF-8"),
    "nested 50,000 deep (flow)": (DEEP_FLOW, "(depth)", f"deeper than {MAX_DEPTH}"),
    "nested deep (block)": (DEEP_BLOCK, "(depth)", f"deeper than {MAX_DEPTH}"),
    "over the size limit": (b"name: big\n# " + b"x" * MAX_POLICY_BYTES + b"\n", "(size)", "the limit is"),
    "aliases that expand": (LAUGHS, "(size)", "aliases"),
    "a list, not a mapping": (b"- name: a\n- name: b\n", "(top level)", "one mapping"),
    "a scalar": (b"just words\n", "(top level)", "one mapping"),
    "broken YAML": (b"name: [unclosed\n", "(yaml)", "while parsing"),
}


@pytest.fixture
def server(tmp_path: Path, backend: Backend) -> Iterator[Server]:
    with running_server(make_config(tmp_path, backend, "auth: {admin_token: adm1n}")) as s:
        yield s


def _policies(server: Server) -> bytes:
    return httpx.get(f"{server.url}/policies", headers=ADMIN).content


def _decide(server: Server, tool: str) -> str:
    r = httpx.post(f"{server.url}/decide", json={"tool": tool}, headers=AGENT)
    assert r.status_code in (200, 403), r.text  # a deny answers 403
    return str(r.json()["action"])


@pytest.mark.parametrize("case", list(BAD_UPLOADS))
def test_a_bad_upload_is_a_400_naming_the_fault_and_nothing_is_written(
    server: Server, tmp_path: Path, case: str
) -> None:
    data, key, words = BAD_UPLOADS[case]
    directory = tmp_path / "policies"
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    policies = _policies(server)
    for name in ("agents", "fresh"):  # replacing a file and creating one
        r = httpx.put(
            f"{server.url}/policy-files/{name}",
            content=data,
            headers={**ADMIN, "Content-Type": "application/yaml"},
            timeout=30,
        )
        assert r.status_code == 400, r.text
        assert r.json()["key"] == key and words in r.json()["error"], r.json()
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before  # no file, no .tmp, no .bak
    assert _policies(server) == policies


def test_a_json_upload_must_carry_its_text_as_a_string(server: Server, tmp_path: Path) -> None:
    before = (tmp_path / "policies" / "agents.yaml").read_bytes()
    for body in (b"[1, 2]", b'{"text": 5}', b'{"text": "name: \\ud800"', b"\xff"):
        r = httpx.put(
            f"{server.url}/policy-files/agents",
            content=body,
            headers={**ADMIN, "Content-Type": "application/json"},
        )
        assert r.status_code == 400, (body, r.text)
    deep = {"text": "name: deep\nrules: " + "[" * 10_000 + "]" * 10_000}
    r = httpx.put(f"{server.url}/policy-files/agents", json=deep, headers=ADMIN)
    assert r.status_code == 400 and r.json()["key"] == "(depth)", r.text
    assert (tmp_path / "policies" / "agents.yaml").read_bytes() == before
    good = {"text": "name: fresh\nagent: zed\nrules: [{tools: ['*'], action: allow}]\n"}
    r = httpx.put(f"{server.url}/policy-files/fresh", json=good, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (tmp_path / "policies" / "fresh.yaml").read_text() == good["text"]


def test_a_hot_reload_of_bad_files_keeps_the_last_good_set_and_recovers(server: Server, tmp_path: Path) -> None:
    directory = tmp_path / "policies"
    agents = directory / "agents.yaml"
    assert _decide(server, "delete_pet") == "deny"
    # A good edit and a bad file land together: the set as a whole does not load, so neither applies.
    agents.write_text(
        agents.read_text().replace('["delete_pet"]\n    action: deny', '["delete_pet"]\n    action: allow')
    )
    for i, (data, key, _) in enumerate(BAD_UPLOADS.values()):
        bad = directory / f"bad{i}.yaml"
        bad.write_bytes(data)
        wait_until(
            # a reload happens on use: decide, then look for the refusal in the log
            lambda key=key, bad=bad: _decide(server, "list_pets") and f"{bad}: {key}" in server.log.read_text(),
            timeout=30,
        )
        assert _decide(server, "delete_pet") == "deny"  # the last good set
        bad.unlink()
    assert "Traceback" not in server.log.read_text()
    wait_until(lambda: _decide(server, "delete_pet") == "allow", timeout=30)  # and it reloads again once fixed


@pytest.mark.parametrize("case", ["invalid UTF-8", "nested 50,000 deep (flow)", "a list, not a mapping"])
def test_a_start_with_a_bad_policy_file_refuses_with_the_file_and_fault(
    tmp_path: Path, backend: Backend, case: str
) -> None:
    data, key, _ = BAD_UPLOADS[case]
    config = make_config(tmp_path, backend, "auth: {admin_token: adm1n}")
    (tmp_path / "policies" / "agents.yaml").write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(config), "--port", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out = done.stdout + done.stderr
    assert done.returncode not in (0, -11), out  # refused, and not a crash of the interpreter
    assert f"{tmp_path / 'policies' / 'agents.yaml'}: {key}" in out, out
    assert "Traceback" not in out, out
