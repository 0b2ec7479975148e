"""The core never imports the edge: no module under shared/ imports functions/ (statically or by name)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _edge_references(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "functions" or a.name.startswith("functions.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "functions" or node.module.startswith("functions."):
                found.append(node.module)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            # importlib.import_module("flux7.functions.app"), a granian factory "flux7.functions.asgi:app_factory", …
            and node.value.startswith(("functions.", "functions:"))
        ):
            found.append(repr(node.value))
    return [f"{path.relative_to(REPO)}: {ref}" for ref in found]


def test_no_module_under_shared_imports_functions() -> None:
    offenders = [ref for path in sorted((REPO / "shared").rglob("*.py")) for ref in _edge_references(path)]
    assert offenders == [], (
        "shared/ must not import functions/ (the web apps come from flux7.shared.webapps):\n" + "\n".join(offenders)
    )


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    sample = REPO / "shared" / "_layers_probe_sample.py"
    sample.write_text(
        "import flux7.functions.app\nfrom flux7.functions import memory\nimport importlib\n"
        "importlib.import_module('flux7.functions.asgi')\nFACTORY = 'flux7.functions.asgi:app_factory'\n"
    )
    try:
        assert len(_edge_references(sample)) == 4
    finally:
        sample.unlink()
