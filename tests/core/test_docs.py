from __future__ import annotations

from pathlib import Path

import msgspec

from shared.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
# Filled by the loader, not config keys; list items documented with their parent key.
INTERNAL = {"config_path", "trace_key"}
DOCUMENTED_AS_LIST = {"policies", "mcp_servers", "cli_tools", "openapi"}


def keys(struct: type, prefix: str = "") -> list[str]:
    out: list[str] = []
    for field in msgspec.structs.fields(struct):
        name = prefix + field.name
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
