"""The fast paths' header dict (functions/raw_asgi.py) and the collector tuning done once the app started
(functions/app.py `_tune_gc`)."""

from __future__ import annotations

import gc
from pathlib import Path

from litestar.testing import TestClient

from flux7.functions import raw_asgi as raw_headers
from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import make_config
from tests.upstreams.servers.http_backend import Backend


def test_names_are_lower_cased_and_the_first_of_repeated_headers_wins() -> None:
    raw = [(b"X-Trace-Id", b"first"), (b"x-trace-id", b"second"), (b"Content-Type", b"application/json")]
    for _ in range(2):  # the second time from the remembered names
        assert raw_headers.header_dict(raw) == {"x-trace-id": "first", "content-type": "application/json"}


def test_values_are_latin1_text() -> None:
    assert raw_headers.header_dict([(b"x-note", "café".encode("latin-1"))]) == {"x-note": "café"}


def test_the_remembered_names_stay_bounded() -> None:
    for i in range(raw_headers._NAMES_MAX * 3):
        assert raw_headers.header_dict([(f"X-N{i}".encode(), b"v")]) == {f"x-n{i}": "v"}
    assert len(raw_headers._NAMES) <= raw_headers._NAMES_MAX


def test_the_collector_is_tuned_once_the_app_has_started(tmp_path: Path, backend: Backend) -> None:
    app = create_app(Mesh(load_settings(make_config(tmp_path, backend, ""), env={})))
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == 10_000
