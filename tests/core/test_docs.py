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
