from __future__ import annotations

import pytest

from flux7.shared.gate.policy import Decision, PolicySet, condition_holds, stricter
from flux7.shared.globs import glob_match
from flux7.shared.settings import Condition, Policy, Rule


def rule(tools: list[str], action: str, condition: Condition | None = None) -> Rule:
    return Rule(tools=tuple(tools), action=action, condition=condition)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("*", "a/b/c", True),
        ("fs.*", "fs.read", True),
        ("fs.*", "fs.a/b", False),  # `*` does not cross `/`
        ("*.read*", "github.read_file", True),  # but crosses `.`
        ("fs.?ead", "fs.read", True),
        ("fs.[rw]ead", "fs.wead", True),
        ("fs.[^r]ead", "fs.read", False),
        ("fs.[", "fs.[", True),  # a bad pattern still matches by equality
        ("fs.[", "fs.x", False),
    ],
)
def test_globs_follow_go_filepath_match(pattern: str, value: str, expected: bool) -> None:
    assert glob_match(pattern, value) is expected


def test_exact_agent_policies_are_evaluated_before_wildcards_and_star() -> None:
    ps = PolicySet(
        [
            Policy(name="everyone", agent="*", rules=(rule(["*"], "deny"),)),
            Policy(name="bots", agent="bot-*", rules=(rule(["*"], "human_approval"),)),
            Policy(name="bot-1", agent="bot-1", rules=(rule(["*"], "allow"),)),
        ]
    )
    assert [p.name for p in ps.policies] == ["bot-1", "bots", "everyone"]
    assert ps.decide("bot-1", "x").rule == "bot-1"
    assert ps.decide("bot-2", "x") == Decision("human_approval", "bots", "policy=bots tool=x action=human_approval")
    assert ps.decide("alice", "x").action == "deny"


def test_no_matching_rule_falls_through_to_later_policies_then_fails_closed() -> None:
    ps = PolicySet(
        [
            Policy(name="claude", agent="claude", rules=(rule(["fs.*"], "allow"),)),
            Policy(name="all", agent="*", rules=(rule(["web.*"], "human_approval"),)),
        ]
    )
    assert ps.decide("claude", "web.fetch").rule == "all"
    d = ps.decide("claude", "db.query")
    assert d == Decision("deny", "default", "no matching policy — fail closed")


def test_first_matching_rule_decides_and_skips_rules_whose_condition_fails() -> None:
    cond = Condition(field="path", operator="starts_with", value=["/etc", "/root"])
    ps = PolicySet([Policy(name="p", agent="*", rules=(rule(["fs.*"], "deny", cond), rule(["fs.*"], "allow")))])
    assert ps.decide("a", "fs.read", {"path": "/etc/passwd"}).action == "deny"
    assert ps.decide("a", "fs.read", {"path": "/tmp/x"}).action == "allow"
    assert ps.decide("a", "fs.read", {}).action == "allow"  # a missing field makes the condition false
    assert ps.decide("a", "fs.read", None).action == "allow"


@pytest.mark.parametrize(
    ("operator", "value", "args", "expected"),
    [
        ("contains", "rm -rf", {"command": "sudo rm -rf /"}, True),
        ("contains", "RM", {"command": "rm x"}, False),  # case-sensitive
        ("not_contains", ["sudo", "curl"], {"command": "ls"}, True),
        ("not_contains", ["sudo", "curl"], {"command": "curl x"}, False),
        ("starts_with", "/home", {"command": "/home/u"}, True),
        ("not_starts_with", ["/etc"], {"command": "/etc/x"}, False),
        ("contains", "b", {"command": ["a", "b"]}, True),  # a list renders as [a b]
        ("starts_with", "[a", {"command": ["a", "b"]}, True),
        (">", 100, {"command": 150}, True),
        (">", 100, {"command": "150"}, True),  # numeric string
        ("<=", 100, {"command": 100.0}, True),
        ("==", 5, {"command": 5}, True),
        ("!=", 5, {"command": 6}, True),
        ("==", "prod", {"command": "prod"}, True),
        ("!=", "prod", {"command": "dev"}, True),
        (">", 5, {"command": "abc"}, False),  # non-numeric field: only == / != apply
        ("~=", 5, {"command": 5}, False),  # unknown operator
        ("==", [1, 2], {"command": 2}, True),  # list value: any of
        ("contains", "x", {"other": "x"}, False),
    ],
)
def test_condition_operators(operator: str, value: object, args: dict[str, object], expected: bool) -> None:
    cond = Condition(field="command", operator=operator, value=value)  # type: ignore[arg-type]
    assert condition_holds(cond, args) is expected


def test_condition_field_is_a_dotted_path_into_the_arguments() -> None:
    cond = Condition(field="params.amount", operator=">", value=10)
    assert condition_holds(cond, {"params": {"amount": 11}})
    assert not condition_holds(cond, {"amount": 11})


def test_floors_win_when_stricter() -> None:
    allow = Decision("allow", "p", "r")
    assert stricter(allow, Decision("deny", "pin:new", "x")).rule == "pin:new"
    assert stricter(Decision("deny", "p", "r"), Decision("human_approval", "pin:changed", "x")).rule == "p"
    assert stricter(allow, None) is allow


def test_decide_is_stable_under_the_candidate_cache() -> None:
    cond = Condition(field="n", operator=">", value=5)
    ps = PolicySet([Policy(name="p", agent="*", rules=(rule(["t"], "deny", cond), rule(["t"], "allow")))])
    for _ in range(3):
        assert ps.decide("a", "t", {"n": 6}).action == "deny"
        assert ps.decide("a", "t", {"n": 1}).action == "allow"
