"""The core never imports the edge: no module under shared/ (flux7.shared) imports functions/ (flux7.functions),
statically, relatively or by name."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EDGE = ("flux7.functions", "functions")  # the installed name, and the old top-level one (never importable twice)


def _is_edge(name: str) -> bool:
    return any(name == e or name.startswith(e + ".") for e in EDGE)


def _edge_references(path: Path, root: Path = REPO) -> list[str]:
    """What `path` (a module of the tree at `root`) imports from the edge."""
    tree = ast.parse(path.read_text(), filename=str(path))
    # the module's package as the installed distribution names it: shared/memory/x.py -> flux7.shared.memory
    package = ["flux7", *path.relative_to(root).parent.parts]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_edge(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            found += [n for n in names if _is_edge(n)]
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            # importlib.import_module("flux7.functions.app"), a granian factory "flux7.functions.asgi:app_factory", …
            and node.value.startswith(tuple(f"{e}{sep}" for e in EDGE for sep in ".:"))
        ):
            found.append(repr(node.value))
    return [f"{path.relative_to(root)}: {ref}" for ref in found]


def test_no_module_under_shared_imports_functions() -> None:
    offenders = [ref for path in sorted((REPO / "shared").rglob("*.py")) for ref in _edge_references(path)]
    why = "shared/ must not import functions/ (the web apps come from functions/entry.py, as an argument):\n"
    assert offenders == [], why + "\n".join(offenders)


def test_the_check_sees_each_form_of_import(tmp_path: Path) -> None:
    # a module of a tree laid out as the repository's (tmp_path/shared/…): the source tree is never written
    sample = tmp_path / "shared" / "probe_sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "import flux7.functions.app\nfrom flux7.functions import memory\nfrom ..functions import tools\n"
        "from .. import functions\nimport importlib\nimportlib.import_module('flux7.functions.asgi')\n"
        "FACTORY = 'flux7.functions.asgi:app_factory'\nimport functions  # the old top-level name\n"
        "from . import db\nfrom .. import shared\nfrom flux7.shared import paths\n"
    )
    assert len(_edge_references(sample, root=tmp_path)) == 7, _edge_references(sample, root=tmp_path)
