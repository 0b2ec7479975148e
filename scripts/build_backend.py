"""flux7's build backend: setuptools' own, working in a temporary folder.

setuptools writes `build/` and `flux7.egg-info/` into the source tree on every `pip wheel .` or `pip install .`
and has no option to put them elsewhere (pypa/setuptools#1816). Each hook here points both at a folder of its
own through distutils' `DIST_EXTRA_CONFIG` file, so a build leaves the checkout as it found it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


@contextlib.contextmanager
def _elsewhere() -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="flux7-build-") as tmp:
        extra = Path(tmp) / "setup.cfg"
        extra.write_text(f"[build]\nbuild_base = {tmp}/build\n\n[egg_info]\negg_base = {tmp}\n", encoding="utf-8")
        before = os.environ.get("DIST_EXTRA_CONFIG")
        os.environ["DIST_EXTRA_CONFIG"] = str(extra)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = before


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    with _elsewhere():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    with _elsewhere():
        return _setuptools.get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    with _elsewhere():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    with _elsewhere():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    with _elsewhere():
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    with _elsewhere():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    with _elsewhere():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Any = None) -> str:
    with _elsewhere():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)
