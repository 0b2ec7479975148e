"""Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, the MCP authorization spec of
2025-11-25): a client names itself by an HTTPS URL, and the JSON document at that URL is its metadata. No
registration: flux7 fetches the document when the client first asks, and keeps it an hour.

A client is still what its redirect URIs are (shared/auth/redirect_uris.py), now published by the host that
serves the document; the consent page shows that URL as the client id. The fetch goes through the outbound guard
(shared/outbound.py): globally routable addresses only unless `oauth.client_metadata_networks` opens others, no
redirects, at most 5 kB, five seconds, four at a time. `oauth.client_metadata_documents: false` refuses URL client
ids."""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from authlib.oauth2.rfc6749 import InvalidClientError, OAuth2Error
from authlib.oauth2.rfc7591 import InvalidClientMetadataError, InvalidRedirectURIError

from flux7.shared.auth.oauth_clients import GRANT_TYPES, ClientStore, OAuthClient
from flux7.shared.auth.redirect_uris import redirect_uri_problem
from flux7.shared.errors import OutboundRefused
from flux7.shared.outbound import OutboundGuard
from flux7.shared.settings import OAuthSettings

__all__ = [
    "ClientMetadataDocuments",
    "TemporarilyUnavailableError",
    "client_metadata",
    "is_metadata_url",
    "metadata_url_problem",
]

log = logging.getLogger("flux7.oauth")

FRESH_SECONDS = 3600.0  # a document is fetched again after this long
STALE_SECONDS = 86400.0  # ...and, while its host cannot be reached, the last one is used this long
MAX_BYTES = 5120  # the draft's suggested limit: a document is a few hundred bytes
TIMEOUT_SECONDS = 5.0
# Fetches at a time: each holds a request thread up to TIMEOUT_SECONDS, and anyone may send a client id URL, so a
# flood of slow documents must not take every thread the other routes need.
MAX_FETCHES = 4
_MAX_URL = 2000

_STRINGS = ("client_name", "client_uri", "logo_uri", "tos_uri", "policy_uri", "software_id", "software_version")
_LISTS = ("redirect_uris", "grant_types", "response_types", "contacts")


def is_metadata_url(client_id: object) -> bool:
    """Whether a client id names a metadata document (registered clients' ids are `f7c_…`)."""
    return isinstance(client_id, str) and client_id.startswith("https://")


def metadata_url_problem(url: str) -> str:
    """Why `url` cannot be a client id (the draft, section 3), or "" when it can."""
    if len(url) > _MAX_URL:
        return f"at most {_MAX_URL} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "not a URL"
    if parts.scheme != "https" or not parts.hostname:
        return "an https URL with a host"
    if parts.username is not None or parts.password is not None:
        return "no user name or password in the URL"
    if "#" in url or parts.query:
        return "no query and no fragment"
    segments = parts.path.split("/")
    if parts.path in ("", "/") or "." in segments or ".." in segments:
        return "a path to the document, without . or .. segments"
    return ""


def client_metadata(data: Any, redirect_schemes: tuple[str, ...]) -> dict[str, Any]:
    """Client metadata checked as flux7 takes it, from a registration (RFC 7591) or a metadata document: strings
    and lists of bounded size, at least one redirect URI that shared/auth/redirect_uris.py admits. Raises
    authlib's InvalidClientMetadataError or InvalidRedirectURIError; returns the metadata with its defaults."""
    if not isinstance(data, dict):
        raise InvalidClientMetadataError("the metadata is a JSON object")
    for key in _STRINGS:
        if key in data and not (isinstance(data[key], str) and len(data[key]) <= 2000):
            raise InvalidClientMetadataError(f"{key}: a string of at most 2000 characters")
    for key in _LISTS:
        value = data.get(key)
        if key in data and not (
            isinstance(value, list) and len(value) <= 10 and all(isinstance(v, str) for v in value)
        ):
            raise InvalidClientMetadataError(f"{key}: a list of at most 10 strings")
    if "client_name" in data and len(data["client_name"]) > 200:
        raise InvalidClientMetadataError("client_name: at most 200 characters")
    uris = data.get("redirect_uris") or []
    if not uris:
        raise InvalidRedirectURIError("redirect_uris: at least one redirect URI is required")
    for uri in uris:
        problem = redirect_uri_problem(uri, redirect_schemes)
        if problem:
            raise InvalidRedirectURIError(problem)
    checked: dict[str, Any] = dict(data)
    checked.setdefault("grant_types", list(GRANT_TYPES))
    checked.setdefault("response_types", ["code"])
    return checked


class TemporarilyUnavailableError(OAuth2Error):
    """RFC 6749 section 4.1.2.1: the server cannot take the request now (too many documents being fetched)."""

    error = "temporarily_unavailable"
    status_code = 503


class _Unreachable(Exception):
    """The document could not be fetched this time (the host down, a timeout): the last one may stand in."""


class ClientMetadataDocuments:
    """The clients that are metadata documents, fetched and kept in the client table (their `created_at` is when
    the document was last fetched)."""

    def __init__(
        self,
        settings: OAuthSettings,
        clients: ClientStore,
        *,
        guard: OutboundGuard | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._schemes = settings.redirect_schemes
        self._clients = clients
        self._guard = guard or OutboundGuard(allow_networks=settings.client_metadata_networks)
        self._ssl = ssl.create_default_context(cafile=settings.client_metadata_ca_file or None)
        self._clock = clock
        self._slots = threading.BoundedSemaphore(MAX_FETCHES)

    def client(self, url: str) -> OAuthClient:
        """The client `url` names, from its document. InvalidClientError (401, so a client may try again) says
        why not."""
        problem = metadata_url_problem(url)
        if problem:
            raise InvalidClientError(description=f"a client id URL must be {problem}")
        cached = self._clients.get(url)
        age = self._clock() - cached.created_at if cached is not None else 0.0
        if cached is not None and age < FRESH_SECONDS:
            return cached
        if not self._slots.acquire(blocking=False):
            if cached is not None and age < STALE_SECONDS:
                return cached
            log.warning("client metadata %s not fetched: %d fetches already under way", url, MAX_FETCHES)
            raise TemporarilyUnavailableError(description="too many client metadata documents are being fetched")
        try:
            metadata = self._fetch(url)
        except _Unreachable as e:
            if cached is not None and age < STALE_SECONDS:
                log.warning("client metadata %s: %s; using the copy fetched %.0f s ago", url, e, age)
                return cached
            raise InvalidClientError(description=f"the client's metadata document could not be fetched: {e}") from None
        finally:
            self._slots.release()
        return self._clients.store_document(url, metadata, now=self._clock())

    def _fetch(self, url: str) -> dict[str, Any]:
        try:
            with (
                self._guard.client(timeout=TIMEOUT_SECONDS, ssl_context=self._ssl) as http,
                http.stream("GET", url, headers={"Accept": "application/json"}) as answer,
            ):
                if answer.status_code != 200:
                    why = "redirects are not followed" if answer.is_redirect else "not 200"
                    raise _refused(f"{url} answered {answer.status_code} ({why})")
                media = answer.headers.get("content-type", "").split(";")[0].strip().lower()
                if media != "application/json":
                    raise _refused(f"{url} is {media or 'untyped'}, not application/json")
                body = bytearray()
                for chunk in answer.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BYTES:
                        raise _refused(f"{url} is larger than {MAX_BYTES} bytes")
        except OutboundRefused as e:
            raise _refused(f"{url}: {e}") from None
        except (httpx.HTTPError, OSError) as e:
            raise _Unreachable(str(e) or type(e).__name__) from None
        try:
            data = json.loads(body)
        except ValueError:
            raise _refused(f"{url} is not JSON") from None
        return self._document(url, data)

    def _document(self, url: str, data: Any) -> dict[str, Any]:
        """The draft's rules for a document (section 4), then flux7's for any client's metadata."""
        if not isinstance(data, dict):
            raise _refused("the document is not a JSON object")
        if data.get("client_id") != url:
            raise _refused(f"the document's client_id is not its own URL {url}")
        if "client_secret" in data or "client_secret_expires_at" in data:
            raise _refused("a metadata document never carries a client secret")
        method = data.get("token_endpoint_auth_method", "none")
        if method != "none":
            raise _refused(f"token_endpoint_auth_method {method!r}: only public clients (none) are taken")
        try:
            metadata = client_metadata(data, self._schemes)
        except (InvalidClientMetadataError, InvalidRedirectURIError) as e:
            raise _refused(f"the document's {e.description}") from None
        if not set(metadata["grant_types"]) <= set(GRANT_TYPES) or metadata["response_types"] != ["code"]:
            raise _refused(f"grant_types within {list(GRANT_TYPES)} and response_types ['code'] only")
        metadata["token_endpoint_auth_method"] = "none"
        return metadata


def _refused(why: str) -> InvalidClientError:
    log.warning("client metadata document refused: %s", why)
    return InvalidClientError(description=why)
