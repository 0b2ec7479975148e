"""One import package, `flux7`: nothing imports the repository's folders under their own top-level names.

`shared/store/db.py` imported once as `flux7.shared.store.db` and once as `shared.store.db` would be two modules with
two sets of classes, so an `except shared.errors.X` would miss a `flux7.shared.errors.X`. The folders are reachable as
top-level names from a checkout (its root is on sys.path), so a test keeps every reference on `flux7.…`.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOP = ("shared", "functions")
# a module path that starts with a bare top-level name: in `-m shared.x`, "functions.asgi:app", "from shared import"
IN_TEXT = re.compile(r"(?<![\w.\-/])(shared|functions)(\.[A-Za-z_]|:[A-Za-z_]| import\b)")


def _top_level_references(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in TOP]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module] if node.module.split(".")[0] in TOP else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and IN_TEXT.search(node.value):
            found.append(repr(node.value[:80]))
    return found


def _sources() -> list[Path]:
    dirs = ("flux7", "shared", "functions", "tests", "bench")
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py") if "node_modules" not in p.parts)


def test_no_source_names_shared_or_functions_as_a_top_level_module() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {ref}"
        for path in _sources()
        if path.resolve() != Path(__file__).resolve()  # its own samples spell the old names on purpose
        for ref in _top_level_references(path)
    ]
    assert offenders == [], "import them as flux7.shared… / flux7.functions…:\n" + "\n".join(offenders)


def test_the_check_sees_each_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import shared.db\nimport functions\nfrom shared import errors\nfrom functions.app import x\n"
        "A = 'functions.asgi:app_factory'\nB = ['-m', 'shared.memory.cli']\nC = 'from functions.entry import main'\n"
        "import flux7.shared.store.db\nfrom flux7.functions import app\nD = 'flux7.functions.asgi:app'\n"
        "E = 'shared/store/db.py'\n"
    )
    assert len(_top_level_references(sample)) == 7, _top_level_references(sample)


def test_importing_every_module_of_the_package_loads_no_top_level_shared_or_functions() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import flux7\n"
        "names = [m.name for m in pkgutil.walk_packages(flux7.__path__, 'flux7.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "stray = sorted(m for m in sys.modules if m.split('.')[0] in ('shared', 'functions'))\n"
        "print(len(names), stray)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    count, stray = out.stdout.strip().split(" ", 1)
    assert int(count) > 150  # every module of flux7.shared and flux7.functions was walked
    assert stray == "[]", stray
