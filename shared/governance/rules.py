"""Governance rules: YAML that turns an agent's scores and facts into findings, in the policy condition language
(shared/gate/policy.py `condition_holds`: field, operator, value), with a severity that escalates while a finding
keeps holding, and the agent's verdict.

    rules:
      - id: behaviour-low
        severity: medium                    # info | low | medium | high | critical
        when:                               # every condition must hold
          - {field: scores.behaviour, operator: "<", value: 60}
        message: behaviour below 60 over the window
        remediation: read the evidence traces; tighten the policy or fix the agent
        evidence: behaviour                 # trace ids to attach: an axis, calls, drift or one event kind
        escalate: true                      # false: the severity stays as written
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.errors import ConfigError
from flux7.shared.gate.policy import condition_holds
from flux7.shared.safe_yaml import load_yaml
from flux7.shared.settings import Condition, GovernanceSettings
from flux7.shared.store.db import Database

__all__ = ["BUILTIN_RULES", "SEVERITIES", "Finding", "GovRule", "Rules", "load_rules", "parse_rules", "verdict_of"]

SEVERITIES = ("info", "low", "medium", "high", "critical")
# the trace ids a finding can carry: each axis' evidence, one kind of behaviour event, the agent's latest calls,
# its calls outside its declared tools
EVIDENCE = (
    "",
    "capability",
    "behaviour",
    "hygiene",
    "calls",
    "drift",
    "denials",
    "approvals_refused",
    "approvals_timed_out",
    "rate_limited",
    "loops",
    "injection",
    "upstream_errors",
)


class GovRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    id: str
    severity: str
    when: tuple[Condition, ...]
    message: str = ""
    remediation: str = ""
    evidence: str = ""
    escalate: bool = True


class Finding(msgspec.Struct, kw_only=True):
    rule: str
    severity: str
    base_severity: str
    occurrences: int
    message: str
    remediation: str
    evidence: list[str]
    first_seen: float
    last_seen: float


BUILTIN_RULES = """
rules:
  - id: undeclared-agent
    severity: high
    when: [{field: facts.declared, operator: "==", value: 0}]
    message: the agent calls tools but is not declared in the catalog
    remediation: declare it in catalog_dir with an owner, its tools and upstreams
    evidence: calls
  - id: no-owner
    severity: medium
    when: [{field: facts.declared, operator: "==", value: 1}, {field: facts.has_owner, operator: "==", value: 0}]
    message: the catalog entry names no owner
    remediation: set `owner` in the agent's catalog entry
  - id: injection-flagged
    severity: high
    when: [{field: counts.injection, operator: ">", value: 0}]
    message: arguments that read like prompt injection were sent
    remediation: inspect the evidence traces; suspend the agent if its input is compromised
    evidence: injection
  - id: destructive-without-approval
    severity: high
    when: [{field: facts.destructive_allowed, operator: ">", value: 0}]
    message: destructive tools are allowed without a human
    remediation: put destructive tools behind human_approval in the agent's policy
    evidence: capability
  - id: behaviour-low
    severity: medium
    when: [{field: scores.behaviour, operator: "<", value: 60}]
    message: behaviour below 60 over the window
    remediation: read the evidence traces; fix the agent or tighten its policy
    evidence: behaviour
  - id: capability-high
    severity: low
    when: [{field: scores.capability, operator: ">=", value: 70}]
    message: the agent may do a lot without a human
    remediation: narrow wildcard rules and grants to what the agent needs
    evidence: capability
  - id: hygiene-low
    severity: low
    when: [{field: scores.hygiene, operator: "<", value: 60}]
    message: governance gaps (owner, drift, pins, wildcards, long grants, timed-out approvals)
    remediation: close the gaps listed in the hygiene evidence
    evidence: hygiene
  - id: declared-drift
    severity: info
    when: [{field: facts.declared, operator: "==", value: 1}, {field: facts.undeclared_tools, operator: ">", value: 0}]
    message: the agent used tools its catalog entry does not declare
    remediation: declare the tools it needs, or deny the others
    evidence: drift
"""


def parse_rules(text: str | bytes, source: str) -> tuple[GovRule, ...]:
    raw = load_yaml(text, source) or {}
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list):
        raise ConfigError(source, "rules", "a governance rules file holds `rules: [...]`")
    out: list[GovRule] = []
    for i, item in enumerate(raw["rules"]):
        try:
            rule = msgspec.convert(item, GovRule, strict=False)
        except msgspec.ValidationError as e:
            raise ConfigError(source, f"rules[{i}]", str(e)) from None
        if rule.severity not in SEVERITIES:
            raise ConfigError(source, f"rules[{i}].severity", f"one of {', '.join(SEVERITIES)}")
        if not rule.when:
            raise ConfigError(source, f"rules[{i}].when", "at least one condition")
        if rule.evidence not in EVIDENCE:
            raise ConfigError(source, f"rules[{i}].evidence", f"one of {', '.join(e for e in EVIDENCE if e)}")
        out.append(rule)
    ids = [r.id for r in out]
    if len(ids) != len(set(ids)):
        raise ConfigError(source, "rules", "duplicate rule id")
    return tuple(out)


def load_rules(settings_path: Path | None) -> tuple[GovRule, ...]:
    if settings_path is None:
        return parse_rules(BUILTIN_RULES, "(built-in governance rules)")
    try:
        data = settings_path.read_bytes()
    except OSError as e:
        raise ConfigError(str(settings_path), "governance.rules_file", e.strerror or str(e)) from None
    return parse_rules(data, str(settings_path))


def escalated(base: str, occurrences: int, after: int) -> str:
    """One severity up for every `after` repeats (occurrences after the first) in a row, never past critical."""
    if after <= 0:
        return base
    level = SEVERITIES.index(base) + max(0, occurrences - 1) // after
    return SEVERITIES[min(level, len(SEVERITIES) - 1)]


def verdict_of(findings: list[Finding]) -> str:
    severities = {f.severity for f in findings}
    if severities & {"high", "critical"}:
        return "fail"
    if severities & {"low", "medium"}:
        return "warn"
    return "pass"


class Rules:
    def __init__(self, db: Database, rules: tuple[GovRule, ...], settings: GovernanceSettings) -> None:
        self._db = db
        self.rules = rules
        self._settings = settings

    def holding(self, facts: dict[str, Any]) -> list[GovRule]:
        return [r for r in self.rules if all(condition_holds(c, facts) for c in r.when)]

    def apply(
        self, agent: str, facts: dict[str, Any], evidence: dict[str, list[str]], now: float | None = None
    ) -> list[Finding]:
        """Record which rules hold for the agent now: a finding that holds again counts one more occurrence
        (at most one per escalation period) and escalates; one that no longer holds is resolved."""
        now = time.time() if now is None else now
        holding = self.holding(facts)
        period = self._settings.escalation_period_seconds
        after = self._settings.escalate_after
        out: list[Finding] = []
        with self._db.write() as conn:
            rows = {
                str(r["rule_id"]): r
                for r in conn.execute(
                    "SELECT * FROM governance_findings WHERE agent_id = ? AND resolved_at IS NULL", (agent,)
                ).fetchall()
            }
            for rule in holding:
                ev = evidence.get(rule.evidence, []) if rule.evidence else []
                row = rows.get(rule.id)
                if row is None:
                    occurrences, first, counted = 1, now, now
                else:
                    occurrences, first, counted = (
                        int(row["occurrences"]),
                        float(row["first_seen"]),
                        float(row["counted_at"]),
                    )
                    if now - counted >= period:
                        occurrences, counted = occurrences + 1, now
                severity = escalated(rule.severity, occurrences, after) if rule.escalate else rule.severity
                conn.execute(
                    "INSERT INTO governance_findings (agent_id, rule_id, base_severity, severity, occurrences, "
                    "first_seen, last_seen, counted_at, message, remediation, evidence, resolved_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (agent_id, rule_id) DO UPDATE SET "
                    "base_severity = excluded.base_severity, severity = excluded.severity, "
                    "occurrences = excluded.occurrences, first_seen = excluded.first_seen, "
                    "last_seen = excluded.last_seen, counted_at = excluded.counted_at, message = excluded.message, "
                    "remediation = excluded.remediation, evidence = excluded.evidence, resolved_at = NULL",
                    (
                        agent,
                        rule.id,
                        rule.severity,
                        severity,
                        occurrences,
                        first,
                        now,
                        counted,
                        rule.message,
                        rule.remediation,
                        json.dumps(ev),
                    ),
                )
                out.append(
                    Finding(
                        rule=rule.id,
                        severity=severity,
                        base_severity=rule.severity,
                        occurrences=occurrences,
                        message=rule.message,
                        remediation=rule.remediation,
                        evidence=ev,
                        first_seen=first,
                        last_seen=now,
                    )
                )
            held = {r.id for r in holding}
            for rule_id in rows.keys() - held:
                conn.execute(
                    "UPDATE governance_findings SET resolved_at = ? WHERE agent_id = ? AND rule_id = ?",
                    (now, agent, rule_id),
                )
        return out

    def current(self, agent: str) -> list[Finding]:
        rows = self._db.query(
            "SELECT * FROM governance_findings WHERE agent_id = ? AND resolved_at IS NULL ORDER BY rule_id", (agent,)
        )
        return [
            Finding(
                rule=str(r["rule_id"]),
                severity=str(r["severity"]),
                base_severity=str(r["base_severity"]),
                occurrences=int(r["occurrences"]),
                message=str(r["message"]),
                remediation=str(r["remediation"]),
                evidence=json.loads(r["evidence"]),
                first_seen=float(r["first_seen"]),
                last_seen=float(r["last_seen"]),
            )
            for r in rows
        ]
