"""A real SMTP server on loopback (aiosmtpd): it records every message it accepts, optionally behind STARTTLS with
a certificate of its own and AUTH LOGIN/PLAIN."""

from __future__ import annotations

import datetime
import email
import email.policy
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.http import free_port
from tests.support.waiting import wait_until

__all__ = ["Mailbox", "self_signed", "smtp_server"]


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.logins: list[str] = []
        self.port = 0
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._lock:
            self.messages.append((list(envelope.rcpt_tos), message))
        return "250 OK"

    def to(self, address: str, count: int = 1) -> list[EmailMessage]:
        def found() -> list[EmailMessage] | None:
            with self._lock:
                got = [m for rcpts, m in self.messages if address in rcpts]
            return got if len(got) >= count else None

        result: list[EmailMessage] = wait_until(found, timeout=20, what=f"{count} email(s) to {address}")
        return result


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files): the relay's, and the CA a client trusts."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "smtp.crt", folder / "smtp.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@contextmanager
def smtp_server(tls: tuple[Path, Path] | None = None, credentials: tuple[str, str] | None = None) -> Iterator[Mailbox]:
    mailbox = Mailbox()
    kwargs: dict[str, Any] = {}
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        kwargs.update(tls_context=context, require_starttls=True)
    if credentials is not None:

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
            ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == credentials
            if ok:
                mailbox.logins.append(data.login.decode())
            return AuthResult(success=ok)

        kwargs.update(authenticator=authenticate, auth_require_tls=True)
    mailbox.port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=mailbox.port, **kwargs)
    controller.start()
    try:
        yield mailbox
    finally:
        controller.stop()
