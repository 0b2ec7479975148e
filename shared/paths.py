"""Where the product's data files live: beside the `flux7` package, in a checkout and in an installed wheel alike.

In the repository `flux7/migrations`, `flux7/console` and `flux7/policies` are symlinks to the top-level
`migrations/`, `console-spa/dist` and `policies/`; the wheel carries them as package data at the same places.
Nothing here resolves symlinks: the package's own location is the anchor.
"""

from __future__ import annotations

from pathlib import Path

import flux7

__all__ = ["CONSOLE_DIST", "MIGRATIONS_DIR", "PACKAGE_ROOT", "POLICIES_DIR"]

PACKAGE_ROOT = Path(flux7.__file__).parent
MIGRATIONS_DIR = PACKAGE_ROOT / "migrations"
CONSOLE_DIST = PACKAGE_ROOT / "console"
POLICIES_DIR = PACKAGE_ROOT / "policies"
