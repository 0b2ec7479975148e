"""The outbound guard (shared/outbound.py, issue 13.4): only globally routable destinations for URLs a caller
supplies, every wrapped and numeric form unwrapped, one lookup per connection and the connection made to the
address that lookup checked."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from flux7.shared.errors import ConfigError, OutboundRefused
from flux7.shared.outbound import OutboundGuard, post_json
from flux7.shared.settings import load_settings
from tests.support.http import serve_json


def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} is an address literal: the OS would not look it up, nor may the guard")


def fixed_dns(*addresses: str) -> Callable[[str, int], list[str]]:
    """A resolver answering fixed records: how the guard reads what DNS says."""
    return lambda host, port: list(addresses)


class Rebinding:
    """A resolver whose answer changes after the first lookup, as a rebinding attacker's DNS does."""

    def __init__(self, first: Sequence[str], then: Sequence[str]) -> None:
        self.answers = [list(first), list(then)]
        self.lookups: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.answers[min(len(self.lookups) - 1, 1)]


REFUSED_LITERALS = {
    "http://100.64.0.1/cb": "shared address space 100.64.0.0/10",
    "http://100.100.100.200/latest/meta-data": "shared address space 100.64.0.0/10",
    "http://169.254.169.254/latest/meta-data": "link-local",
    "http://127.0.0.1:9/cb": "loopback",
    "http://[::1]/cb": "loopback",
    "http://0.0.0.0/cb": "unspecified",
    "http://10.1.2.3/cb": "private",
    "http://172.16.5.5/cb": "private",
    "http://192.168.0.10/cb": "private",
    "http://198.18.0.1/cb": "private",
    "http://224.0.0.1/cb": "multicast",
    "http://[fd00::1]/cb": "private",
    "http://[fd12:3456::9]/cb": "private",
    "http://[fe80::1]/cb": "link-local",
    "http://[fec0::1]/cb": "site-local",
    "http://[ff0e::1]/cb": "multicast",
    "http://[2002:7f00:1::]/cb": "6to4 for 127.0.0.1: loopback",
    "http://[2002:a9fe:a9fe::1]/cb": "6to4 for 169.254.169.254: link-local",
    "http://[2002:6464:64c8::]/cb": "6to4 for 100.100.100.200: shared address space",
    "http://[::ffff:127.0.0.1]/cb": "IPv4-mapped for 127.0.0.1: loopback",
    "http://[::ffff:100.100.100.200]/cb": "IPv4-mapped for 100.100.100.200",
    "http://[64:ff9b::7f00:1]/cb": "NAT64 for 127.0.0.1: loopback",
    "http://[64:ff9b::a9fe:a9fe]/cb": "NAT64 for 169.254.169.254: link-local",
    "http://[64:ff9b:1::5db8:d822]/cb": "local-use NAT64",
    "http://[::7f00:1]/cb": "IPv4-compatible for 127.0.0.1: loopback",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/cb": "Teredo for 192.0.2.45: private",
    "http://[2001:0:4136:e378:8000:63bf:a247:27dd]/cb": "(Teredo for 93.184.216.34)",  # even to a global client
    "http://[::5db8:d822]/cb": "(IPv4-compatible for 93.184.216.34)",  # deprecated form: never a destination
    "http://0x7f.1/cb": "0x7f.1 reads as 127.0.0.1",
    "http://2130706433/cb": "2130706433 reads as 127.0.0.1",
    "http://0x7f000001/cb": "reads as 127.0.0.1",
    "http://127.1/cb": "127.1 reads as 127.0.0.1",
    "http://0xa9.254.169.254/cb": "reads as 169.254.169.254, which is not globally routable (link-local)",
    "http://1684301000/cb": "1684301000 reads as 100.100.100.200, which is not globally routable (shared",
}


@pytest.mark.parametrize("url", sorted(REFUSED_LITERALS))
def test_every_non_global_form_of_an_address_is_refused_without_a_lookup(url: str) -> None:
    with pytest.raises(OutboundRefused) as refused:
        OutboundGuard(resolver=no_dns).check_url(url)
    assert REFUSED_LITERALS[url] in refused.value.message
    assert "not globally routable" in refused.value.message
    assert refused.value.status_code == 400


@pytest.mark.parametrize("host", ["0177.0.0.1", "017700000001", "0x7f.0.0.1", "127.000.000.001"])
def test_octal_and_padded_forms_read_as_the_os_reads_them(host: str) -> None:
    # httpx itself will not parse some of these as a URL host; the guard, asked for the connection, reads them
    # as inet_aton (and so getaddrinfo) does.
    with pytest.raises(OutboundRefused, match=r"reads as 127\.0\.0\.1.*loopback"):
        OutboundGuard(resolver=no_dns).addresses(host, 80)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/cb", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("http:///cb", "no host"),
        ("http://[::zz]/cb", "not a valid URL"),
    ],
)
def test_what_is_not_an_http_url_with_a_host_is_refused(url: str, why: str) -> None:
    with pytest.raises(OutboundRefused, match=why):
        OutboundGuard(resolver=no_dns).check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://93.184.216.34/cb",
        "http://[2606:4700::1111]:8443/cb",
        "http://[2002:5db8:d822::]/cb",  # 6to4 of a global IPv4 address
        "http://[64:ff9b::5db8:d822]/cb",  # NAT64 of a global IPv4 address
        "http://[::ffff:93.184.216.34]/cb",
    ],
)
def test_globally_routable_destinations_pass(url: str) -> None:
    assert OutboundGuard(resolver=no_dns).check_url(url)


def test_a_name_is_judged_by_every_address_it_resolves_to() -> None:
    assert OutboundGuard(resolver=fixed_dns("93.184.216.34")).check_url("https://hooks.example.com/x") == [
        "93.184.216.34"
    ]
    metadata = OutboundGuard(resolver=fixed_dns("100.100.100.200"))
    with pytest.raises(OutboundRefused, match=r"hooks\.example\.com resolves to 100\.100\.100\.200.*shared"):
        metadata.check_url("https://hooks.example.com/x")
    mixed = OutboundGuard(resolver=fixed_dns("93.184.216.34", "10.0.0.7"))
    with pytest.raises(OutboundRefused, match=r"resolves to 10\.0\.0\.7.*private"):
        mixed.check_url("https://hooks.example.com/x")
    wrapped = OutboundGuard(resolver=fixed_dns("2002:7f00:1::"))
    with pytest.raises(OutboundRefused, match=r"6to4 for 127\.0\.0\.1"):
        wrapped.check_url("https://hooks.example.com/x")
    with pytest.raises(OutboundRefused, match="cannot resolve"):
        OutboundGuard(resolver=fixed_dns()).check_url("https://nothing.example.com/x")
    with pytest.raises(OutboundRefused, match="cannot resolve"):
        OutboundGuard().check_url(f"https://{'a' * 70}.invalid/x")  # a label IDNA cannot encode
    idna = OutboundGuard(resolver=lambda host, port: ["93.184.216.34"] if host == "xn--bcher-kva.example" else [])
    assert idna.check_url("https://bücher.example/x") == ["93.184.216.34"]  # looked up as it will be connected


@pytest.mark.parametrize("url", ["http://localhost/cb", "http://localhost:9090/cb", "http://api.localhost/cb"])
def test_localhost_names_are_refused_by_what_the_system_resolver_answers(url: str) -> None:
    # `localhost` resolves to loopback (refused as such); `*.localhost` does not resolve here (refused too)
    with pytest.raises(OutboundRefused, match=r"loopback|cannot resolve"):
        OutboundGuard().check_url(url)


def test_allowed_networks_open_only_what_they_name() -> None:
    guard = OutboundGuard(allow_networks=["127.0.0.0/8", "fd00:1::/64"], resolver=no_dns)
    assert guard.check_url("http://127.0.0.1:8080/cb") == ["127.0.0.1"]
    assert guard.check_url("http://0x7f.1/cb") == ["127.0.0.1"]  # connected to as the address it reads as
    assert guard.check_url("http://[::ffff:127.0.0.1]/cb") == ["::ffff:127.0.0.1"]
    assert guard.check_url("http://[fd00:1::5]/cb") == ["fd00:1::5"]
    for url in ("http://10.0.0.1/cb", "http://[fd00:2::5]/cb", "http://100.100.100.200/cb", "http://[::1]/cb"):
        with pytest.raises(OutboundRefused):
            guard.check_url(url)


def test_an_allowed_network_that_is_not_a_network_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"outbound\.allow_networks\[1\]"):
        load_settings(None, env={}, outbound={"allow_networks": ["127.0.0.0/8", "loopback"]})
    assert load_settings(None, env={}).outbound.allow_networks == ()


def test_a_rebinding_name_connects_to_the_address_that_was_checked() -> None:
    """DNS answers an allowed address first and a refused one after. The guard looks the name up once for
    the connection and connects to the address it checked: the refused server hears nothing. (127.0.0.2
    stands for a global address: the one the operator allows here; 127.0.0.1 is not allowed.)"""
    with serve_json(lambda *_: (200, {"who": "checked"}), host="127.0.0.2") as (checked_url, checked):
        port = int(checked_url.rsplit(":", 1)[1])
        with serve_json(lambda *_: (200, {"who": "rebound"}), host="127.0.0.1", port=port) as (_, rebound):
            dns = Rebinding(first=["127.0.0.2"], then=["127.0.0.1"])
            guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=dns)
            with guard.client(timeout=5) as client:
                response = client.post(f"http://hooks.example.test:{port}/cb", json={"event": "approved"})
    assert response.json() == {"who": "checked"}
    assert dns.lookups == ["hooks.example.test"]
    assert len(checked) == 1 and not rebound
    assert checked[0]["headers"]["host"] == f"hooks.example.test:{port}"  # the name, not the pinned address


def test_a_rebinding_answer_on_a_later_connection_is_refused() -> None:
    with serve_json(lambda *_: (200, {}), host="127.0.0.2") as (checked_url, checked):
        port = int(checked_url.rsplit(":", 1)[1])
        with serve_json(lambda *_: (200, {}), host="127.0.0.1", port=port) as (_, rebound):
            dns = Rebinding(first=["127.0.0.2"], then=["127.0.0.1"])
            guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=dns)
            assert guard.check_url(f"http://hooks.example.test:{port}/cb") == ["127.0.0.2"]  # at submit
            with guard.client(timeout=5) as client, pytest.raises(OutboundRefused, match=r"127\.0\.0\.1.*loopback"):
                client.post(f"http://hooks.example.test:{port}/cb", json={})  # at delivery: answered loopback
    assert not checked and not rebound
    assert dns.lookups == ["hooks.example.test", "hooks.example.test"]


def test_a_redirect_is_followed_only_to_a_destination_that_passes() -> None:
    with serve_json(lambda *_: (204, b"")) as (refused_url, refused):
        port = refused_url.rsplit(":", 1)[1]
        locations = {
            "/to-loopback": f"http://127.0.0.1:{port}/steal",
            "/to-hex": f"http://0x7f.1:{port}/steal",
            "/to-6to4": f"http://[2002:7f00:1::]:{port}/steal",
            "/to-allowed": "/final",
        }

        def redirect(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[object, ...]:
            if path in locations:
                return 307, b"", {"location": locations[path]}
            return 200, {"final": path}

        with serve_json(redirect, host="127.0.0.2") as (base, seen):
            guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=no_dns)
            with guard.client(timeout=5) as client:
                for path in ("/to-loopback", "/to-hex", "/to-6to4"):
                    with pytest.raises(OutboundRefused, match=r"^redirect to .*127\.0\.0\.1.*loopback"):
                        post_json(client, f"{base}{path}", {"event": "approved"})
                assert post_json(client, f"{base}/to-allowed", {"event": "approved"}) == 200
    assert refused == []
    assert [s["path"] for s in seen] == ["/to-loopback", "/to-hex", "/to-6to4", "/to-allowed", "/final"]
    assert seen[-1]["method"] == "POST" and seen[-1]["body"] == b'{"event":"approved"}'  # 307 keeps the POST


def test_redirects_stop_after_the_limit() -> None:
    def loop(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[object, ...]:
        return 307, b"", {"location": "/again"}

    with serve_json(loop, host="127.0.0.2") as (base, seen):
        guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=no_dns)
        with guard.client(timeout=5) as client:
            assert post_json(client, f"{base}/start", {}, max_redirects=2) == 307
    assert len(seen) == 3


def test_the_guarded_client_takes_no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy would resolve the name itself, after the guard: proxy variables must not route around it."""
    with serve_json(lambda *_: (200, {"who": "proxy"})) as (proxy_url, via_proxy):
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("ALL_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        with serve_json(lambda *_: (200, {"who": "target"}), host="127.0.0.2") as (base, direct):
            guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=no_dns)
            with guard.client(timeout=5) as client:
                assert client.post(f"{base}/cb", json={}).json() == {"who": "target"}
    assert via_proxy == [] and len(direct) == 1


def _certificate_for(name: str, tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for the DNS name `name`: (the server's context, a client context trusting it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return server, ssl.create_default_context(cafile=str(tmp / "cert.pem"))


def test_https_to_the_pinned_address_keeps_the_name_for_sni_and_the_certificate(tmp_path: Path) -> None:
    server_tls, trusting = _certificate_for("hooks.example.test", tmp_path)
    sni: list[str | None] = []
    server_tls.sni_callback = lambda _sock, name, _ctx: sni.append(name)
    with serve_json(lambda *_: (200, {"tls": True}), host="127.0.0.2", tls=server_tls) as (base, seen):
        port = base.rsplit(":", 1)[1]
        guard = OutboundGuard(allow_networks=["127.0.0.2/32"], resolver=fixed_dns("127.0.0.2"))
        with guard.client(timeout=5, ssl_context=trusting) as client:
            assert client.post(f"https://hooks.example.test:{port}/cb", json={}).json() == {"tls": True}
            # the certificate is checked against the name asked for, not the address connected to
            with pytest.raises(httpx.ConnectError, match="certificate"):
                client.post(f"https://other.example.test:{port}/cb", json={})
    assert sni[0] == "hooks.example.test"
    assert len(seen) == 1 and seen[0]["headers"]["host"] == f"hooks.example.test:{port}"
