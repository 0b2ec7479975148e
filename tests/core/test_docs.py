from __future__ import annotations

import re
from pathlib import Path

import msgspec

from flux7.shared.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
# Filled by the loader, not config keys; list items documented with their parent key.
INTERNAL = {"config_path", "trace_key", "home"}
DOCUMENTED_AS_LIST = {"policies", "mcp_servers", "cli_tools", "openapi"}


def keys(struct: type, prefix: str = "") -> list[str]:
    out: list[str] = []
    for field in msgspec.structs.fields(struct):
        name = prefix + field.encode_name  # the key as the config file spells it (`from`, not `sender`)
        if field.name in INTERNAL:
            continue
        inner = field.type
        args = getattr(inner, "__args__", ())
        nested = next((a for a in (inner, *args) if isinstance(a, type) and issubclass(a, msgspec.Struct)), None)
        if nested is not None and field.name not in DOCUMENTED_AS_LIST:
            out.extend(keys(nested, name + "."))
        else:
            out.append(name)
    return out


def test_every_setting_is_documented() -> None:
    text = DOC.read_text()
    missing = [k for k in keys(Settings) if f"`{k}`" not in text]
    assert not missing, f"undocumented settings in docs/config.md: {missing}"


REPO = Path(__file__).resolve().parents[2]


def _sh_blocks(section: str) -> list[str]:
    """The shell lines of the README section whose heading is `section`."""
    text = (REPO / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = body.split("```sh\n")[1:]
    return [line for block in blocks for line in block.split("```", 1)[0].splitlines() if line.strip()]


def test_readme_has_one_run_command_and_one_test_command() -> None:
    assert _sh_blocks("Run it") == ["scripts/serve"]
    assert _sh_blocks("Test it") == ["scripts/test"]
    for script in ("serve", "test"):
        assert (REPO / "scripts" / script).stat().st_mode & 0o111, f"scripts/{script} is not executable"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert lines[-1] == _sh_blocks("Test it")[0]


def _docs() -> list[Path]:
    return sorted((REPO / "docs").rglob("*.md"))


def test_the_docs_never_send_readers_outside_the_repository() -> None:
    """The guides are for users: no design documents or contracts that only the developers have."""
    forbidden = re.compile(r"CONTRACT|DESIGN\.md|DESIGN decision|DESIGN \"|\bdecision \d+\b|\.\./shared/|seeds/")
    found = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()[:80]}"
        for page in _docs()
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if forbidden.search(line)
    ]
    assert not found, "docs point outside the repository:\n" + "\n".join(found)


def test_every_relative_link_in_the_docs_and_readme_resolves_inside_the_repository() -> None:
    broken = []
    for page in [REPO / "README.md", *_docs()]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.is_relative_to(REPO) or not resolved.exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, broken


def test_design_rationale_lives_under_docs_design() -> None:
    design = REPO / "docs" / "design"
    pages = {p.name for p in design.glob("*.md")}
    assert {"README.md", "retrieval.md", "memory-write-path.md"} <= pages
    index = (design / "README.md").read_text()
    assert all(f"({name})" in index for name in pages - {"README.md"}), "docs/design/README.md must list every page"


def _user_pages() -> list[Path]:
    """What users read: the README and docs/*.md (docs/design/ is for contributors)."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """Numbered lines outside code fences, with inline code spans removed (a data example may say anything)."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, re.sub(r"`[^`]*`", "``", line)))
    return out


# What users do not have: the tracker's issue numbers, the development sessions and their worktrees, and an
# unexplained "reference" (the original flux7 is named, and docs/coming-from-go.md says what it is).
PRIVATE = re.compile(
    r"\bissue #?\d+|\bissues? \d+ (?:and|to) \d+|\bsessions? \d+\b|/work/|\bwt[-/]\w+|\bs\d+start\b|\bthe reference\b",
    re.IGNORECASE,
)


def test_user_pages_cite_nothing_a_user_does_not_have() -> None:
    found = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()[:90]}"
        for page in _user_pages()
        for n, line in _prose(page.read_text())
        if PRIVATE.search(line)
    ]
    assert not found, "issue numbers, session references or worktree paths in user pages:\n" + "\n".join(found)


def test_module_and_test_tables_live_under_docs_design() -> None:
    tables = [
        f"{page.relative_to(REPO)}:{n}"
        for page in _user_pages()
        for n, line in _prose(page.read_text())
        if re.match(r"\|\s*module\s*\|", line)
    ]
    assert not tables, f"module tables in user pages (docs/design/inside.md holds them): {tables}"


def test_every_page_that_names_the_original_flux7_says_what_it_is() -> None:
    unexplained = [
        page.relative_to(REPO).as_posix()
        for page in _user_pages()
        if page.name != "coming-from-go.md"
        and re.search(r"the original flux7", page.read_text(), re.IGNORECASE)
        and "coming-from-go.md" not in page.read_text()
    ]
    assert not unexplained, f"say what the original flux7 is (link docs/coming-from-go.md): {unexplained}"


def test_coming_from_go_lists_each_switch_that_restores_the_original_behaviour() -> None:
    page = (REPO / "docs" / "coming-from-go.md").read_text()
    for switch in ("auth.open_loopback: true", "auth.allow_claimed_identity: true", "mcp.result_shape: reference"):
        assert f"`{switch}`" in page, switch
    config = DOC.read_text()
    for key in re.findall(r"`((?:auth|mcp|supervisor)\.[a-z_]+)", page):  # every key it names is a documented one
        assert f"`{key}`" in config, key
    assert "coming-from-go.md" in (REPO / "README.md").read_text()
    assert "coming-from-go.md" in (REPO / "docs" / "README.md").read_text()
