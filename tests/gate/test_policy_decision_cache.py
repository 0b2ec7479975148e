"""PolicySet remembers a decision no condition can change (shared/gate/policy.py): it must never stand in for one the
arguments decide, nor outlive the policies it came from (a hot reload builds a new set)."""

from __future__ import annotations

import os
from pathlib import Path

from flux7.shared.gate.policy import PolicySet
from flux7.shared.gate.policy_store import PolicyStore
from flux7.shared.settings import Condition, Policy, Rule, load_settings


def rule(tools: list[str], action: str, condition: Condition | None = None) -> Rule:
    return Rule(tools=tuple(tools), action=action, condition=condition)  # type: ignore[arg-type]


def test_a_conditional_rule_ahead_keeps_the_arguments_deciding_on_every_call() -> None:
    ps = PolicySet(
        [
            Policy(
                name="pets",
                agent="*",
                rules=(
                    rule(["get_pet"], "deny", Condition(field="id", operator="==", value="2")),
                    rule(["get_pet", "list_pets"], "allow"),
                ),
            )
        ]
    )
    for _ in range(3):  # asked again and again, in turns
        assert ps.decide("a", "get_pet", {"id": "2"}).action == "deny"
        assert ps.decide("a", "get_pet", {"id": "1"}).action == "allow"
        assert ps.decide("a", "get_pet", None).action == "allow"
    first = ps.decide("a", "list_pets", {"id": "2"})
    assert first.action == "allow" and first.reason == "policy=pets tool=list_pets action=allow"
    assert ps.decide("a", "list_pets", {"anything": 1}) == first
    assert ps.decide("a", "other", {}).rule == "default"  # no rule: the fail-closed default, every time
    assert ps.decide("a", "other", {}).action == "deny"
    assert ps.decide("b", "list_pets", {}).action == "allow"  # another agent: its own entry


def test_a_hot_reload_answers_with_the_new_policies(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    policy = tmp_path / "policies" / "agents.yaml"
    policy.write_text("name: agents\nagent: '*'\nrules:\n  - tools: ['ping']\n    action: allow\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"storage_path: {tmp_path}/flux7.db\npolicy_dir: policies\nmemory: {{enabled: false}}\n")
    store = PolicyStore(load_settings(config, env={}))
    assert store.current.decide("a", "ping", {}).action == "allow"
    assert store.current.decide("a", "ping", {}).action == "allow"  # now remembered
    policy.write_text("name: agents\nagent: '*'\nrules:\n  - tools: ['ping']\n    action: deny\n")
    st = policy.stat()
    os.utime(policy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert store.reload_if_changed() is True
    assert store.current.decide("a", "ping", {}).action == "deny"
