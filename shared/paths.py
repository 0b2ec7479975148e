"""Where the product's data files live: beside the `flux7` package, in a checkout and in an installed wheel alike.

In the repository `flux7/migrations`, `flux7/console` and `flux7/policies` are symlinks to the top-level
`migrations/`, `console-spa/dist` and `policies/`; the wheel carries them as package data at the same places.
The package's own location is the anchor (a symlinked `flux7/shared` resolves elsewhere); the data folders are then
resolved, so a checkout hands out the real top-level folders (what logs, errors and the static files router see).
"""

from __future__ import annotations

from pathlib import Path

import flux7

__all__ = ["CONSOLE_DIST", "MIGRATIONS_DIR", "PACKAGE_ROOT", "POLICIES_DIR"]

PACKAGE_ROOT = Path(flux7.__file__).parent
MIGRATIONS_DIR = (PACKAGE_ROOT / "migrations").resolve()
CONSOLE_DIST = (PACKAGE_ROOT / "console").resolve()
POLICIES_DIR = (PACKAGE_ROOT / "policies").resolve()
