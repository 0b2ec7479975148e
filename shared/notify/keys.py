"""Server secrets kept in the data directory: created 0600 on first start, published whole (link, not rename, so
two workers starting together agree on one and neither reads a half-written file)."""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import secrets
import stat
from pathlib import Path

from flux7.shared.store.private_files import private_dir

__all__ = ["LINK_KEY_FILE", "WEBHOOK_SECRET_FILE", "load_or_create_secret", "new_link_key", "new_webhook_secret"]

log = logging.getLogger("flux7.notify")

WEBHOOK_SECRET_FILE = "notify-webhook.secret"
LINK_KEY_FILE = "notify-links.key"


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: `whsec_` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def new_link_key() -> str:
    return secrets.token_hex(32)


def load_or_create_secret(path: Path, *, webhook: bool = False) -> str:
    """The secret in `path`; on first start a new one (`whsec_…` when `webhook`, else 64 hex characters)."""
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write((new_webhook_secret() if webhook else new_link_key()) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another worker won: use its secret
            os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return _read(path)


def _read(path: Path) -> str:
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"{path}: a secret of at least 32 characters is expected")
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s is readable by others (mode %o)", path, mode & 0o777)
    return text
