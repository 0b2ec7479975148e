from __future__ import annotations

from typing import Any

import pytest

from flux7.shared.supervisor.config import RuleConfig
from flux7.shared.supervisor.rules import RuleEngine, parse_condition

CTX: dict[str, Any] = {
    "tool": "Filesystem.Read_File",
    "agent_id": "claude",
    "params": {"path": "/home/u/Proj/a.txt", "n": 3, "flags": {"force": True}},
    "injection_risk": True,
}


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        ("tool contains read", True),
        ("tool contains write", False),
        ("tool equals filesystem.read_file", True),
        ("tool == FILESYSTEM.READ_FILE", True),
        ("tool starts_with filesystem.", True),
        ("tool not_equals filesystem.read_file", False),
        ("tool != filesystem.delete", True),
        ("agent_id equals claude", True),
        ("injection_risk == true", True),
        ("injection_risk != true", False),
        ("params.n == 3", True),
        ("params.flags.force == true", True),
        ("params.missing != x", False),  # a missing field never matches
        ("params.path contains proj/", True),
        ("params.path starts_with '/home/u/proj'", True),
    ],
)
def test_condition_operators_compare_lower_cased(condition: str, holds: bool) -> None:
    assert parse_condition(condition).holds(CTX, []) is holds


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/home/u/proj/a.txt", True),
        ("/home/u/proj", True),
        ("/home/u/PROJ/sub/b", True),
        ("/home/u/project2/a.txt", False),
        ("/home/u/proj/../../../etc/passwd", False),
        ("/etc/passwd", False),
        ("", False),
    ],
)
def test_project_dir_means_inside_a_project_directory(path: str, inside: bool) -> None:
    dirs = ["/home/u/proj", "/srv/other/"]
    assert parse_condition("params.path starts_with project_dir").holds({"params": {"path": path}}, dirs) is inside
    assert parse_condition("params.path != project_dir").holds({"params": {"path": path}}, dirs) is (not inside)


def test_the_first_matching_rule_wins_and_explains_itself() -> None:
    engine = RuleEngine(
        [
            RuleConfig(name="secrets", condition="params.path contains .ssh", action="deny", confidence=0.99),
            RuleConfig(
                name="project-writes",
                condition="params.path starts_with project_dir",
                action="approve",
                description="inside the project",
            ),
            RuleConfig(name="reads", condition="tool contains read", action="approve"),
            RuleConfig(name="default", condition=None, action="escalate", confidence=1.0),
        ],
        ["/home/u/proj"],
    )
    m = engine.evaluate({"tool": "fs.write", "params": {"path": "/home/u/proj/x"}})
    assert m is not None and (m.rule, m.action) == ("project-writes", "approve")
    assert m.reasoning == "rule 'project-writes' matched; path=/home/u/proj/x; inside the project"
    m = engine.evaluate({"tool": "fs.read", "params": {"path": "/home/u/proj/.ssh/id_rsa"}})
    assert m is not None and m.rule == "secrets" and m.action == "deny"
    assert m.reasoning == "rule 'secrets' matched; path=/home/u/proj/.ssh/id_rsa"
    m = engine.evaluate({"tool": "fs.read", "params": {}})
    assert m is not None and m.rule == "reads" and m.reasoning == "rule 'reads' matched" and not m.catch_all
    m = engine.evaluate({"tool": "shell.exec", "params": {"cmd": "ls"}})
    assert m is not None and m.rule == "default" and m.catch_all


def test_an_unparsable_condition_is_refused() -> None:
    for bad in ("tool", "tool is read", "== read", "tool equals"):
        with pytest.raises(ValueError):
            parse_condition(bad)


@pytest.mark.parametrize(
    ("args", "inside"),
    [
        (["/home/u/proj/build"], True),
        (["-p", "/home/u/proj/a/b"], True),  # a flag is not a path
        (["/home/u/proj/a", "/etc/cron.d"], False),  # every path must be inside
        (["/home/u/proj/../../etc"], False),
        (["-p"], False),  # no path at all
        ([], False),
    ],
)
def test_project_dir_against_a_cli_tools_args_needs_every_path_inside(args: list[str], inside: bool) -> None:
    ctx = {"params": {"args": args}}
    assert parse_condition("params.args starts_with project_dir").holds(ctx, ["/home/u/proj"]) is inside


def test_the_example_sup7_yaml_approves_the_example_tools_inside_the_project_and_logs_under_data() -> None:
    from pathlib import Path

    from flux7.shared.supervisor.config import load_config

    repo = Path(__file__).resolve().parents[2]
    config = load_config(repo / "examples" / "sup7.yaml")
    engine = RuleEngine(config.rules, config.project_dirs)
    project = config.project_dirs[0]

    def verdict(tool: str, args: list[str]) -> tuple[str, str]:
        match = engine.evaluate({"tool": tool, "agent_id": "claude", "params": {"args": args, "flags": {}}})
        assert match is not None
        return match.rule, match.action

    # dirs.run is the example config's tool that asks a human (config.example.yaml, policies/)
    assert verdict("dirs.run", ["-p", f"{project}/build"]) == ("dirs-in-project", "approve")
    assert verdict("dirs.run", [f"{project}/a", "/etc/x"]) == ("default", "escalate")
    assert verdict("dirs.run", [f"{project}/.ssh/keys"]) == ("secrets", "deny")
    assert Path(config.decision_log).parts[0] == "data"  # never into the repository root
