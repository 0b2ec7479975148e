from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from litestar.testing import TestClient

from flux7.shared.gate.policy_store import PolicyStore
from tests.functions.conftest import ADMIN, AGENT


def bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def force_check(client: TestClient[Any]) -> PolicyStore:
    store: PolicyStore = client.app.state.mesh.policies
    store.reload_if_changed()
    return store


def test_policy_dir_edits_hot_reload_and_a_broken_edit_keeps_the_last_good_set(
    client: TestClient[Any], config: Path
) -> None:
    policy = config.parent / "policies" / "agents.yaml"
    assert client.post("/decide", json={"tool": "delete_pet"}, headers=AGENT).json()["action"] == "deny"
    policy.write_text(
        policy.read_text().replace(
            '  - tools: ["delete_pet"]\n    action: deny', '  - tools: ["delete_pet"]\n    action: allow'
        )
    )
    bump_mtime(policy)
    store = force_check(client)
    assert client.post("/decide", json={"tool": "delete_pet"}, headers=AGENT).json()["action"] == "allow"
    policy.write_text("name: agents\nrules: [{tools: ['*'], action: maybe}]\n")
    bump_mtime(policy)
    store = force_check(client)
    assert "maybe" in store.last_error or "action" in store.last_error
    assert client.post("/decide", json={"tool": "delete_pet"}, headers=AGENT).json()["action"] == "allow"


def test_per_tool_edit_adds_an_exact_rule_before_the_deciding_one_and_keeps_a_backup(
    client: TestClient[Any], config: Path
) -> None:
    r = client.put("/policies/claude/tools/create_pet", json={"action": "allow", "by": "ann"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["changed"] is True
    created = Path(body["file"])
    assert yaml.safe_load(created.read_text())["agent"] == "claude"
    assert client.post("/decide", json={"tool": "create_pet"}, headers=AGENT).json()["action"] == "allow"
    # a second edit of the same file keeps a .bak of the previous text
    r = client.put("/policies/claude/tools/create_pet", json={"action": "deny"}, headers=ADMIN)
    assert Path(r.json()["backup"]).read_text() == yaml.safe_dump(
        yaml.safe_load(Path(r.json()["backup"]).read_text()), sort_keys=False
    )
    assert client.post("/decide", json={"tool": "create_pet"}, headers=AGENT).json()["action"] == "deny"
    r = client.put("/policies/claude/tools/create_pet", json={"action": "inherit"}, headers=ADMIN)
    assert r.json()["changed"] is True
    assert client.post("/decide", json={"tool": "create_pet"}, headers=AGENT).json()["action"] == "human_approval"
    edits = client.get("/traces", params={"tool": "mesh.policy_edit"}, headers=ADMIN).json()
    assert len(edits) == 3 and edits[-1]["user_id"] == "ann" and edits[-1]["agent_id"] == ""


def test_per_tool_edit_refuses_bad_actions_and_hand_written_conditional_rules(
    client: TestClient[Any], config: Path
) -> None:
    assert client.put("/policies/x/tools/t", json={"action": "maybe"}, headers=ADMIN).status_code == 400
    (config.parent / "policies" / "bob.yaml").write_text(
        "name: bob\nagent: bob\nrules:\n  - tools: [list_pets]\n    action: deny\n"
        "    condition: {field: limit, operator: '>', value: 100}\n"
    )
    force_check(client)
    r = client.put("/policies/bob/tools/list_pets", json={"action": "allow"}, headers=ADMIN)
    assert r.status_code == 409 and "hand-written" in r.json()["error"]


def test_policy_files_are_validated_before_writing(client: TestClient[Any], config: Path) -> None:
    names = [f["name"] for f in client.get("/policy-files", headers=ADMIN).json()]
    assert names == ["agents"]
    text = client.get("/policy-files/agents", headers=ADMIN).json()["text"]
    bad = client.put(
        "/policy-files/agents", content=b"name: agents\nrules: [{tools: [x], action: nope}]\n", headers=ADMIN
    )
    assert bad.status_code == 400 and bad.json()["key"]
    assert (config.parent / "policies" / "agents.yaml").read_text() == text  # nothing half-written
    dup = client.put("/policy-files/other", content=b"name: agents\nrules: []\n", headers=ADMIN)
    assert dup.status_code == 400 and "duplicate" in dup.json()["error"]
    assert client.put("/policy-files/..%2Fescape", content=b"name: e\n", headers=ADMIN).status_code in (400, 404)
    ok = client.put(
        "/policy-files/extra",
        content=b"name: extra\nagent: zed\nrules: [{tools: ['*'], action: allow}]\n",
        headers=ADMIN,
    )
    assert ok.status_code == 200 and ok.json()["reloaded"] is True
    decided = client.post("/decide", json={"tool": "delete_pet"}, headers={"Authorization": "Bearer agent:zed"})
    assert decided.json()["rule"] == "extra"
    assert client.get("/policy-files/missing", headers=ADMIN).status_code == 404


def test_put_takes_the_names_get_takes_with_or_without_yaml(client: TestClient[Any], config: Path) -> None:
    policy = config.parent / "policies" / "agents.yaml"
    text = client.get("/policy-files/agents.yaml", headers=ADMIN).json()["text"]
    assert text == client.get("/policy-files/agents", headers=ADMIN).json()["text"] == policy.read_text()
    edited = text.replace('tools: ["delete_pet"]\n    action: deny', 'tools: ["delete_pet"]\n    action: allow')
    assert edited != text
    r = client.put("/policy-files/agents.yaml", json={"text": edited}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "agents" and policy.read_text() == edited
    assert [f["name"] for f in client.get("/policy-files", headers=ADMIN).json()] == ["agents"]  # no agents.yaml.yaml
    assert client.post("/decide", json={"tool": "delete_pet"}, headers=AGENT).json()["action"] == "allow"
    # the same validation under either name: a fault names its key, nothing is written
    bad = client.put(
        "/policy-files/agents.yaml", json={"text": "name: agents\nrules: [{tools: [x], action: no}]\n"}, headers=ADMIN
    )
    assert bad.status_code == 400 and bad.json()["key"] == "rules[0].action" and policy.read_text() == edited
    # the browser guard holds on the new spelling: another site's page may not write a policy file
    cross = {**ADMIN, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    refused = client.put("/policy-files/agents.yaml", json={"text": text}, headers=cross)
    assert refused.status_code == 403 and policy.read_text() == edited
    # and the same refusals of names neither accepts
    for name in ("..yaml", ".hidden.yaml", "a%20b.yaml"):
        got, put = (
            client.get(f"/policy-files/{name}", headers=ADMIN),
            client.put(f"/policy-files/{name}", json={"text": "name: x\n"}, headers=ADMIN),
        )
        assert got.status_code == put.status_code == 400, (name, got.text, put.text)
