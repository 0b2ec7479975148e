"""Governance rules: the policy condition language over scores and facts, each severity escalation, the
escalation period, resolution, verdicts, and a clear error for a bad rules file."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.governance.rules import escalated, parse_rules
from tests.governance.support import ADMIN, call, governed_mesh
from tests.governance.test_scores import evaluate
from tests.support.mesh import mesh_client
from tests.upstreams.servers.http_backend import Backend

RULES = """
rules:
  - id: denied-calls
    severity: info
    when: [{field: counts.denials, operator: ">", value: 0}]
    message: the agent was denied
    remediation: fix the agent or its policy
    evidence: behaviour
  - id: ownerless
    severity: medium
    escalate: false
    when: [{field: facts.has_owner, operator: "==", value: 0}, {field: facts.declared, operator: "==", value: 1}]
    remediation: name an owner
"""


def _rules(tmp_path: Path, text: str = RULES) -> str:
    (tmp_path / "rules.yaml").write_text(text)
    return "governance: {rules_file: rules.yaml, escalate_after: 1, escalation_period_seconds: 0}\n"


async def test_a_repeated_finding_escalates_through_every_severity_to_critical(
    tmp_path: Path, backend: Backend
) -> None:
    async with mesh_client(governed_mesh(tmp_path, backend, extra=_rules(tmp_path))) as client:
        denied = await call(client, "claude", "delete_pet", {"petId": "1"})
        assert denied.status_code == 403
        seen: list[tuple[str, int, str]] = []
        for _ in range(6):
            scored = (await evaluate(client))["claude"]
            [finding] = scored["findings"]
            seen.append((finding["severity"], finding["occurrences"], scored["verdict"]))
        # escalate_after 1 and no period: one level up per repeat, never past critical
        assert seen == [
            ("info", 1, "pass"),
            ("low", 2, "warn"),
            ("medium", 3, "warn"),
            ("high", 4, "fail"),
            ("critical", 5, "fail"),
            ("critical", 6, "fail"),
        ]
        assert finding["base_severity"] == "info"
        assert finding["evidence"] == [denied.json()["trace_id"]]
        detail = (await client.get("/governance/agents/claude", headers=ADMIN)).json()
        assert detail["findings"][0]["severity"] == "critical" and detail["verdict"] == "fail"


def test_escalation_steps() -> None:
    assert [escalated("info", n, 1) for n in range(1, 7)] == ["info", "low", "medium", "high", "critical", "critical"]
    # escalate_after 3: three repeats (the 4th occurrence) go one up, six repeats two
    steps = [escalated("low", n, 3) for n in (1, 3, 4, 6, 7, 10)]
    assert steps == ["low", "low", "medium", "medium", "high", "critical"]
    assert escalated("medium", 100, 0) == "medium"  # 0: never


async def test_each_verdict_and_no_escalation_within_a_period(tmp_path: Path, backend: Backend) -> None:
    extra = _rules(tmp_path).replace("escalation_period_seconds: 0", "escalation_period_seconds: 3600")
    catalog = (
        "agents:\n  - {id: claude, tools: [list_pets], lifecycle: active}\n"
        "  - {id: tidy, owner: t, tools: [list_pets]}\n"
    )
    async with mesh_client(governed_mesh(tmp_path, backend, catalog=catalog, extra=extra)) as client:
        await call(client, "tidy", "list_pets")
        await call(client, "claude", "list_pets")
        for _ in range(3):
            scored = await evaluate(client)
        # ownerless is medium and does not escalate (escalate: false); within the period nothing is recounted
        [ownerless] = scored["claude"]["findings"]
        assert (ownerless["rule"], ownerless["severity"], ownerless["occurrences"]) == ("ownerless", "medium", 1)
        assert scored["claude"]["verdict"] == "warn"
        assert scored["tidy"]["verdict"] == "pass" and scored["tidy"]["findings"] == []
        await call(client, "tidy", "delete_pet", {"petId": "1"})
        tidy = (await evaluate(client))["tidy"]
        assert [(f["rule"], f["severity"]) for f in tidy["findings"]] == [("denied-calls", "info")]
        assert tidy["verdict"] == "pass"  # info alone passes

        findings = (await client.get("/governance/findings", headers=ADMIN)).json()
        assert {(f["agent"], f["rule"]) for f in findings} == {("claude", "ownerless"), ("tidy", "denied-calls")}
        mediums = (await client.get("/governance/findings", params={"severity": "medium"}, headers=ADMIN)).json()
        assert [f["agent"] for f in mediums] == ["claude"]
        verdicts = (await client.get("/governance/verdicts", headers=ADMIN)).json()
        assert {v["agent"]: v["verdict"] for v in verdicts} == {"claude": "warn", "tidy": "pass"}


async def test_a_finding_that_stops_holding_is_resolved_and_starts_over(tmp_path: Path, backend: Backend) -> None:
    catalog = "id: claude\ntools: [list_pets]\nlifecycle: active\n"
    async with mesh_client(governed_mesh(tmp_path, backend, catalog=catalog, extra=_rules(tmp_path))) as client:
        await call(client, "claude", "list_pets")
        assert [f["rule"] for f in (await evaluate(client))["claude"]["findings"]] == ["ownerless"]
        fixed = "id: claude\nowner: alice\ntools: [list_pets]\nlifecycle: active\n"
        put = await client.put("/governance/catalog/files/agents", json={"text": fixed}, headers=ADMIN)
        assert put.status_code == 200
        scored = (await evaluate(client))["claude"]
        assert scored["findings"] == [] and scored["verdict"] == "pass"
        assert (await client.get("/governance/findings", headers=ADMIN)).json() == []


def test_a_bad_rules_file_is_refused_naming_the_key() -> None:
    cases = {
        "rules: [{id: a, severity: urgent, when: [{field: x, operator: '>', value: 1}]}]": "rules[0].severity",
        "rules: [{id: a, severity: low, when: []}]": "rules[0].when",
        "rules: [{id: a, severity: low, when: [{field: x}]}]": "rules[0]",
        "rules: [{id: a, severity: low, evidence: logs, when: [{field: x, operator: '>', value: 1}]}]": (
            "rules[0].evidence"
        ),
        "nothing: here": "rules",
    }
    for text, key in cases.items():
        with pytest.raises(ConfigError) as caught:
            parse_rules(text, "rules.yaml")
        assert caught.value.key == key, text


def test_a_bad_rules_file_stops_the_start(tmp_path: Path, backend: Backend) -> None:
    with pytest.raises(ConfigError) as caught:
        governed_mesh(tmp_path, backend, extra=_rules(tmp_path, "rules: [{id: a}]"))
    assert "rules.yaml" in str(caught.value)
