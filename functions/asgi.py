"""The entry points granian workers import: config from FLUX7_CONFIG (set by `flux7 serve` / `mesh7 serve`).
`flux7 serve` runs the app over RSGI (`rsgi_factory`); `app_factory` is the ASGI app itself."""

from __future__ import annotations

import os

from litestar import Litestar

from flux7.functions.app import create_app
from flux7.functions.rsgi import RsgiApp
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings, with_cli_openapi

__all__ = ["app_factory", "rsgi_factory"]


def app_factory() -> Litestar:
    overrides: dict[str, object] = {}
    if os.environ.get("FLUX7_STORAGE_PATH"):
        overrides["storage_path"] = os.environ["FLUX7_STORAGE_PATH"]
    if os.environ.get("FLUX7_HOST"):  # the address `flux7 serve` bound: it decides which identities count
        overrides["host"] = os.environ["FLUX7_HOST"]
    settings = with_cli_openapi(
        load_settings(os.environ.get("FLUX7_CONFIG") or None, None, **overrides),
        os.environ.get("FLUX7_OPENAPI_URL", ""),
        os.environ.get("FLUX7_OPENAPI_BACKEND", ""),
    )
    return create_app(Mesh(settings))


def rsgi_factory() -> RsgiApp:
    """What `flux7 serve`'s granian workers import: the app over RSGI (functions/rsgi.py)."""
    return RsgiApp(app_factory())
