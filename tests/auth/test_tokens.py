"""The per-agent token store (shared/auth/tokens.py) over a real SQLite file, the identity it gives, and
`flux7 token …` as a real process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flux7.shared.auth.identity import IdentityResolver, accepted_identities
from flux7.shared.auth.tokens import TokenStore, parse_expiry
from flux7.shared.errors import BadRequest, ConfigError, Conflict, NotFound, Unauthorized
from flux7.shared.settings import load_settings
from flux7.shared.store.db import Database

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(store: Database) -> Database:
    return store


def test_a_token_is_shown_once_and_stored_only_as_its_hash(db: Database, tmp_path: Path) -> None:
    issued = TokenStore(db).issue("claude", note="ci runner")
    token = issued.token
    assert token.startswith("f7a_") and len(token) == 4 + 43 and "." not in token  # never mistaken for a JWT
    row = db.query_one("SELECT * FROM agent_tokens WHERE id = ?", (issued.record.id,))
    assert row["token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert row["prefix"] == token[:12] and row["agent_id"] == "claude" and row["note"] == "ci runner"
    db.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("flux7.db*") if p.is_file())
    assert token.encode() not in raw and token[12:].encode() not in raw


def test_authenticate_maps_a_live_token_to_its_agent_only(db: Database) -> None:
    store = TokenStore(db)
    a, b = store.issue("claude"), store.issue("claude")
    assert a.token != b.token
    found = store.authenticate(a.token)
    assert found is not None and found.agent_id == "claude" and found.id == a.record.id
    assert found.last_used_at is None  # the record as it was; the use is written behind it
    assert store.find(a.record.id).last_used_at is not None
    assert store.authenticate(a.token[:-1] + ("A" if a.token[-1] != "A" else "B")) is None
    assert store.authenticate("agent:claude") is None and store.authenticate("") is None
    store.revoke(a.record.id)
    assert store.authenticate(a.token) is None
    assert store.authenticate(b.token) is not None  # revoking one leaves the agent's others


def test_an_expired_token_is_refused(db: Database) -> None:
    store = TokenStore(db)
    issued = store.issue("claude", expires_at=time.time() + 3600)
    assert store.authenticate(issued.token) is not None
    db.execute("UPDATE agent_tokens SET expires_at = ? WHERE id = ?", (time.time() - 1, issued.record.id))
    assert store.authenticate(issued.token) is None
    assert store.find(issued.record.id).state() == "expired"
    with pytest.raises(BadRequest):
        store.issue("claude", expires_at=time.time() - 1)


def test_revoke_by_id_or_unique_prefix(db: Database) -> None:
    store = TokenStore(db)
    one, two = store.issue("claude"), store.issue("boss")
    with pytest.raises(NotFound):
        store.revoke("tok_000000000000")
    with pytest.raises(BadRequest):
        store.revoke("f7a_")  # too short is refused before it could match everything
    with pytest.raises(BadRequest):
        store.revoke("claude")
    revoked = store.revoke(one.token[:9])
    assert revoked.id == one.record.id and revoked.state() == "revoked"
    again = store.revoke(one.record.id)  # idempotent: the same record, still revoked at the first time
    assert again.revoked_at == revoked.revoked_at
    assert store.revoke(two.token).agent_id == "boss"  # the whole token names it too
    assert [t.state() for t in store.list()] == ["revoked", "revoked"]
    assert store.list(agent_id="boss")[0].id == two.record.id


def test_revoke_refuses_an_ambiguous_prefix(db: Database) -> None:
    store = TokenStore(db)
    tokens = [store.issue("claude") for _ in range(3)]
    db.execute("UPDATE agent_tokens SET prefix = 'f7a_samesame'")  # force a collision on the shown part
    with pytest.raises(Conflict, match="matches 3 tokens"):
        store.revoke("f7a_same")
    assert all(store.authenticate(t.token) is not None for t in tokens)


@pytest.mark.parametrize("agent", ["", " claude", "a b", "-x", "x" * 129, "ünï", "a\nb"])
def test_agent_ids_are_validated(db: Database, agent: str) -> None:
    with pytest.raises(BadRequest, match="invalid agent id"):
        TokenStore(db).issue(agent)


def test_expiry_parsing() -> None:
    assert parse_expiry("", now=100) is None and parse_expiry("never", now=100) is None
    assert parse_expiry("30d", now=100) == 100 + 30 * 86400
    assert parse_expiry("1h30m", now=100) == 100 + 5400
    for bad in ("soon", "-1h", "0s", "3x"):
        with pytest.raises(BadRequest):
            parse_expiry(bad)


@pytest.mark.parametrize("never_ending", ["1e309d", "infd", "nand", "inf", "1e400h", "99999d", "87601h"])
def test_an_expiry_that_is_not_finite_or_absurd_is_refused_not_a_token_that_never_expires(never_ending: str) -> None:
    with pytest.raises(BadRequest, match="invalid expiry"):
        parse_expiry(never_ending)


def test_identity_resolution_with_tokens(db: Database, tmp_path: Path) -> None:
    store = TokenStore(db)
    token = store.issue("claude").token
    home = {"HOME": str(tmp_path)}  # the built-in defaults' data directory (its admin token) under the test's folder
    loop = IdentityResolver(load_settings(None, home), store)
    caller = loop.caller(f"Bearer {token}")
    assert caller.agent_id == "claude" and caller.via_token and caller.verified and caller.authenticated
    assert loop.require(loop.caller("Bearer agent:demo")).agent_id == "demo"  # loopback: today's behaviour
    assert loop.require(loop.caller(None)).agent_id == "anonymous"
    with pytest.raises(Unauthorized, match="agent token"):
        loop.caller("Bearer f7a_unknown")
    wide = IdentityResolver(load_settings(None, home, host="0.0.0.0"), store)
    assert wide.require(wide.caller(f"Bearer {token}")).agent_id == "claude"
    for bare in ("Bearer agent:claude", "Bearer claude", None):
        with pytest.raises(Unauthorized, match="authentication required"):
            wide.require(wide.caller(bare))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("host: 0.0.0.0\nauth: {allow_claimed_identity: true, require_authentication: true}\n")
    restored = IdentityResolver(load_settings(cfg), store)
    assert restored.require(restored.caller("Bearer agent:claude")).agent_id == "claude"
    with pytest.raises(Unauthorized):
        restored.require(restored.caller(None))  # require_authentication still refuses anonymous
    assert accepted_identities(load_settings(cfg)).endswith("claimed agent ids yes, anonymous no")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "token", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.served
def test_the_cli_issues_lists_and_revokes(tmp_path: Path, database_url: str) -> None:
    cfg = tmp_path / "config.yaml"
    on_postgres = f"database: {database_url}\nmemory: {{enabled: false}}\n" if database_url else ""
    cfg.write_text(f"storage_path: {tmp_path}/data/flux7.db\n{on_postgres}")
    issued = cli("issue", "claude", "--note", "laptop", "--expires", "30d", "--config", str(cfg))
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    assert token.startswith("f7a_") and "shown this once" in issued.stderr
    listed = cli("list", "--config", str(cfg))
    assert token[:12] in listed.stdout and "claude" in listed.stdout and "laptop" in listed.stdout
    assert token not in listed.stdout
    store = TokenStore(Database(database_url or tmp_path / "data" / "flux7.db"))  # where the config says
    record = store.authenticate(token)
    assert record is not None and record.expires_at is not None and record.expires_at > time.time() + 29 * 86400
    revoked = cli("revoke", token[:10], "--config", str(cfg), "--json")
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["state"] == "revoked"
    assert store.authenticate(token) is None
    missing = cli("revoke", "tok_ffffffffffff", "--config", str(cfg))
    assert missing.returncode == 1 and "no token with id" in missing.stderr
    bad = cli("issue", "a b", "--config", str(cfg))
    assert bad.returncode == 1 and "invalid agent id" in bad.stderr and bad.stdout == ""
    broken = cli("list", "--config", str(tmp_path / "nope.yaml"))
    assert broken.returncode == 2 and "config error" in broken.stderr


def test_resource_url_must_be_an_http_base_url(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    for bad in ("mesh.example.com", "ftp://x", "https://x/?a=1"):
        cfg.write_text(f"auth: {{resource_url: '{bad}'}}\n")
        with pytest.raises(ConfigError, match=r"auth\.resource_url"):
            load_settings(cfg)
    cfg.write_text("auth: {resource_url: 'https://mesh.example.com/'}\n")
    assert load_settings(cfg).auth.resource_url == "https://mesh.example.com/"


def test_listing_by_an_id_no_token_can_have_is_empty_on_every_engine(db: Database) -> None:
    store = TokenStore(db)
    store.issue("claude")
    assert store.list(agent_id="cl\x00aude") == []  # PostgreSQL refuses a NUL in text: never reaches it
    assert [t.agent_id for t in store.list(agent_id="claude")] == ["claude"]
