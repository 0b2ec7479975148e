from __future__ import annotations

import json
import time
from collections.abc import Iterator

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from flux7.shared.auth.identity import IdentityResolver
from flux7.shared.errors import Unauthorized
from flux7.shared.settings import load_settings
from tests.support.http import serve_json


@pytest.fixture(scope="module")
def keys() -> tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]:
    return (
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


@pytest.fixture(scope="module")
def jwks_url(keys: tuple[rsa.RSAPrivateKey, rsa.RSAPrivateKey]) -> Iterator[str]:
    jwk = json.loads(RSAAlgorithm.to_jwk(keys[0].public_key()))
    jwk.update(kid="k1", alg="RS256", use="sig")
    with serve_json(lambda *_: (200, {"keys": [jwk]})) as (base, _):
        yield base + "/.well-known/jwks.json"


def token(key: rsa.RSAPrivateKey, **claims: object) -> str:
    payload = {
        "sub": "agent-a",
        "iss": "https://idp",
        "aud": "flux7",
        "exp": int(time.time()) + 300,
        **claims,
    }
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})


def resolver(**jwt_cfg: object) -> IdentityResolver:
    auth: dict[str, object] = {"open_loopback": True}  # no admin token file in the working directory
    return IdentityResolver(load_settings(None, env={}, auth={**auth, "jwt": jwt_cfg} if jwt_cfg else auth))


def test_bearer_rules_without_jwt() -> None:
    r = resolver()
    assert r.caller(None).agent_id == "anonymous"
    assert r.caller("Bearer agent:claude").agent_id == "claude"
    assert r.caller("Bearer some-opaque-token").agent_id == "some-opaque-token"


def test_valid_jwt_gives_the_agent_and_user_claims(jwks_url: str, keys: tuple) -> None:
    r = resolver(jwks_url=jwks_url, issuer="https://idp", audience="flux7", agent_claim="agent", user_claim="email")
    caller = r.caller("Bearer " + token(keys[0], agent="bot-7", email="ann@example.com"))
    assert (caller.agent_id, caller.user_id, caller.authenticated) == ("bot-7", "ann@example.com", True)


@pytest.mark.parametrize(
    "make",
    [
        lambda k: token(k[1]),  # signed by a key not in the JWKS
        lambda k: token(k[0], exp=int(time.time()) - 10),  # expired
        lambda k: token(k[0], aud="other"),  # wrong audience
        lambda k: token(k[0], iss="https://evil"),  # wrong issuer
        lambda k: "not-a-jwt",
        lambda k: "agent:claude",  # legacy bearer refused when JWT is configured
    ],
)
def test_invalid_credentials_are_refused_with_401(jwks_url: str, keys: tuple, make) -> None:  # type: ignore[no-untyped-def]
    r = resolver(jwks_url=jwks_url, issuer="https://idp", audience="flux7")
    with pytest.raises(Unauthorized, match="authentication required"):
        r.caller("Bearer " + make(keys))


def test_legacy_bearer_allowed_when_configured(jwks_url: str) -> None:
    r = resolver(jwks_url=jwks_url, allow_legacy=True)
    assert r.caller("Bearer agent:claude").agent_id == "claude"


def test_require_authentication_refuses_anonymous() -> None:
    r = IdentityResolver(load_settings(None, env={}, auth={"require_authentication": True, "open_loopback": True}))
    with pytest.raises(Unauthorized):
        r.require(r.caller(None))
    assert r.require(r.caller("Bearer agent:x")).agent_id == "x"


def test_control_plane_gate() -> None:
    open_ = resolver()
    assert open_.is_admin(None, "127.0.0.1") and open_.is_admin(None, "::1")
    assert not open_.is_admin(None, "10.0.0.5")
    guarded = IdentityResolver(load_settings(None, env={"MESH_ADMIN_TOKEN": "s3cret"}))
    assert guarded.is_admin("Bearer s3cret", "10.0.0.5")
    assert not guarded.is_admin("Bearer wrong", "127.0.0.1")
    assert not guarded.is_admin(None, "127.0.0.1")
