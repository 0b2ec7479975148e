"""One import package, `flux7`: the repository's `shared/` and `functions/` folders load as `flux7.shared` and
`flux7.functions` only.

`shared/store/db.py` imported once as `flux7.shared.store.db` and once as `shared.store.db` would be two modules with
two sets of classes, so an `except shared.errors.X` would miss a `flux7.shared.errors.X`. A checkout's root is on
sys.path (pytest's `pythonpath = ["."]`, `python -c` run in it), so the folders' `__init__.py` refuse to load under
their own top-level names (CONTRIBUTING.md, "One import name")."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import flux7

REPO = Path(__file__).resolve().parents[2]


def test_the_checkout_root_is_on_sys_path_so_the_folders_are_reachable_as_top_level_names() -> None:
    # the premise of the guard below: without it, `import shared` would find the folder
    assert str(REPO) in [str(Path(p).resolve()) for p in sys.path if p]
    assert (REPO / "shared" / "__init__.py").is_file() and (REPO / "functions" / "__init__.py").is_file()


@pytest.mark.parametrize(
    ("wrong", "right"),
    [
        ("shared.errors", "flux7.shared"),
        ("shared", "flux7.shared"),
        ("shared.store.db", "flux7.shared"),
        ("functions.app", "flux7.functions"),
    ],
)
def test_importing_a_folder_as_a_top_level_module_fails_naming_the_import_to_write(wrong: str, right: str) -> None:
    top = wrong.split(".")[0]
    with pytest.raises(ImportError, match=rf"imported as {right}, not as '{top}': write `{right}\.…`") as e:
        importlib.import_module(wrong)
    assert "CONTRIBUTING.md" in str(e.value)
    assert top not in sys.modules and wrong not in sys.modules  # nothing half-loaded under the wrong name


def test_the_same_module_imported_as_flux7_is_unaffected() -> None:
    from flux7.shared.errors import ConfigError

    assert importlib.import_module("flux7.shared.errors").ConfigError is ConfigError
    assert importlib.import_module("flux7.shared").__name__ == "flux7.shared"


def test_every_module_of_the_package_imports_under_flux7_and_nothing_loads_a_top_level_shared_or_functions() -> None:
    names = [m.name for m in pkgutil.walk_packages(flux7.__path__, "flux7.")]
    for name in names:
        importlib.import_module(name)  # a stray `import shared…` anywhere raises the guard's ImportError here
    assert len(names) > 150  # every module of flux7.shared and flux7.functions was walked
    assert sorted(m for m in sys.modules if m.split(".")[0] in ("shared", "functions")) == []
