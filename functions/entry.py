"""The composition root behind every console script that serves HTTP (`flux7`, `mesh7`, `mem7`).

The core (`shared/`) never imports the edge; the command tree gets the web apps from here, as an argument
(shared/cli/kit.py `WebApps`). The app modules themselves are imported only when a command serves (so `--help`
stays instant).

    python -m flux7.functions.entry …   # the same as `flux7 …`
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from flux7.shared.cli.kit import WebApps

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["APPS", "main", "mem7_main", "mesh7_main"]


def _mesh_app(mesh: Mesh) -> Any:
    from flux7.functions.app import create_app

    return create_app(mesh)


APPS = WebApps(
    mesh_factory="flux7.functions.asgi:rsgi_factory",
    memory_factory="flux7.functions.memory:serve_app",
    mesh_app=_mesh_app,
)


def main(argv: list[str] | None = None) -> int:
    from flux7.shared.cli.main import main as flux7

    return flux7(argv, APPS)


def mesh7_main(argv: list[str] | None = None) -> int:
    from flux7.shared.cli.main import mesh7_main as mesh7

    return mesh7(argv, APPS)


def mem7_main(argv: list[str] | None = None) -> int:
    from flux7.shared.memory.cli import main as mem7

    return mem7(argv, apps=APPS)


if __name__ == "__main__":
    sys.exit(main())
