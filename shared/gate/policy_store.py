"""Hot reload of policies: the config file's `policies` and every `policy_dir/*.yaml`, re-read when they change.

Each worker checks file fingerprints at most once a second on use; a broken edit keeps the last good set."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from flux7.shared.errors import ConfigError
from flux7.shared.gate.policy import PolicySet
from flux7.shared.gate.policy_files import DirectoryCopy
from flux7.shared.settings import Policy, Settings, load_policy_dir, load_settings, parse_policy
from flux7.shared.store.db import Database

__all__ = ["PolicyStore"]

log = logging.getLogger("flux7.policy")


class PolicyStore:
    CHECK_INTERVAL = 1.0

    def __init__(
        self,
        settings: Settings,
        db: Database | None = None,
        on_loaded: Callable[[str, dict[str, str]], object] | None = None,
    ) -> None:
        self._settings = settings
        self._db = db
        self._on_loaded = on_loaded  # told each set of policy files in force (the diff engine's versions)
        self._lock = threading.Lock()
        self._fingerprint = self._files_fingerprint()
        self._current = PolicySet(settings.policies, version=self._fingerprint)
        self._next_check = time.monotonic() + self.CHECK_INTERVAL
        self.last_error = ""
        # the files' copy in the database: on PostgreSQL the deployment's policy files (shared/gate/policy_files.py)
        self._copy = DirectoryCopy(db, self.policy_dir, "policy_files", "policy")
        if self._copy.shared and self._copy.pull():
            self.reload_if_changed(force=True)  # an instance starting with older files takes the deployment's
        else:
            self._record()

    @property
    def policy_dir(self) -> Path | None:
        s = self._settings
        return s.resolve_path(s.policy_dir) if s.policy_dir else None

    def _files(self) -> list[Path]:
        files = [Path(self._settings.config_path)] if self._settings.config_path else []
        if self.policy_dir is not None and self.policy_dir.is_dir():
            files.extend(sorted(self.policy_dir.glob("*.yaml")))
        return files

    def _files_fingerprint(self) -> str:
        h = hashlib.sha256()
        for f in self._files():
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f}:{st.st_mtime_ns}:{st.st_size};".encode())
        return h.hexdigest()[:16]

    @property
    def current(self) -> PolicySet:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.CHECK_INTERVAL
            self._copy.poll()  # PostgreSQL: another instance's edit written here first, then reloaded below
            self.reload_if_changed()
        return self._current

    def editing(self) -> contextlib.AbstractContextManager[None]:
        """Around a control-plane edit of policy_dir (shared/gate/policy_edit.py): on PostgreSQL the deployment's
        newest files first, and no pull in the middle of the edit (shared/gate/policy_files.py DirectoryCopy)."""
        return self._copy.editing(self.reload_if_changed)

    def reload_if_changed(self, *, force: bool = False) -> bool:
        with self._lock:
            fp = self._files_fingerprint()
            if fp == self._fingerprint and not force:
                return False
            self._fingerprint = fp
            try:
                if self._settings.config_path:
                    # the config file's own `policies` plus its policy_dir, exactly as at start
                    policies = load_settings(self._settings.config_path, env={}).policies
                else:
                    base = tuple(p for p in self._settings.policies if not p.source_file)
                    directory = self.policy_dir
                    policies = (*base, *load_policy_dir(directory)) if directory else base
                names = [p.name for p in policies]
                if len(names) != len(set(names)):
                    dup = next(n for n in names if names.count(n) > 1)
                    raise ConfigError(self._settings.config_path or "policy_dir", "policies", f"duplicate {dup!r}")
            except ConfigError as e:
                self.last_error = str(e)
                log.error("policy reload failed, keeping the last good set: %s", e)
                return False
            except Exception as e:  # whatever a file holds, enforcement goes on with the last good set
                self.last_error = f"policy reload failed: {e or e.__class__.__name__}"
                log.exception("policy reload failed, keeping the last good set")
                return False
            self.last_error = ""
            self._current = PolicySet(policies, version=fp)
            log.info("policies reloaded: %d policies", len(policies))
        self._record()
        return True

    def _record(self) -> None:
        """Copy the policy files of the set now in force into the database (shared/gate/policy_files.py), so the
        replica carries them. A failure here is logged: it never changes which policies are enforced."""
        directory = self.policy_dir
        if self._db is None or directory is None:
            return
        self._copy.record()
        if self._on_loaded is not None:
            try:
                texts = {
                    p.name: p.read_bytes().decode("utf-8", errors="replace") for p in sorted(directory.glob("*.yaml"))
                }
                self._on_loaded("policy", texts)
            except Exception:
                log.exception("policy versions not recorded")

    def validate_text(self, text: str | bytes, name: str) -> Policy:
        """Validate one policy file's text as the loader would; raises ConfigError."""
        return parse_policy(text, str((self.policy_dir or Path.cwd()) / f"{name}.yaml"))
