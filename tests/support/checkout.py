"""The README's starting point, in a temporary folder: a copy of the checkout's example config (its port made a
free one), policies and catalog, and an environment of a new terminal whose home is a temporary folder (so the
per-user data directory, ~/.local/share/flux7, is the test's own)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from tests.support.server import REPO

__all__ = ["data_dir", "readme_checkout", "terminal_env"]

# What configures flux7 or points into a checkout: a new terminal has none of it.
_DROPPED = ("FLUX7_", "MESH_", "MEM7_", "SUP7_", "XDG_DATA_HOME", "VIRTUAL_ENV", "PYTHONPATH")


def readme_checkout(root: Path, port: int) -> Path:
    """`root/checkout`: config.example.yaml (on `port`), policies/ and catalog/, as a clone has them."""
    checkout = root / "checkout"
    checkout.mkdir(parents=True)
    text = (REPO / "config.example.yaml").read_text()
    assert "\nport: 9090\n" in text
    (checkout / "config.example.yaml").write_text(text.replace("\nport: 9090\n", f"\nport: {port}\n"))
    for folder in ("policies", "catalog"):
        shutil.copytree(REPO / folder, checkout / folder)
    return checkout


def terminal_env(home: Path, **extra: str) -> dict[str, str]:
    """A new shell's environment: HOME is `home`, nothing flux7-specific set, this checkout's code importable and
    the test interpreter's scripts (flux7, mesh, mesh7, mem7) on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    scripts = str(Path(sys.executable).parent)
    return {**env, "HOME": str(home), "PYTHONPATH": str(REPO), "PATH": f"{scripts}:{env.get('PATH', '')}", **extra}


def data_dir(home: Path) -> Path:
    return home / ".local" / "share" / "flux7"
