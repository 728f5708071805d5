"""Fetching a client's image URL without letting the URL choose what the worker reaches.

Every hop (the first request and each redirect, followed here one by one) is checked before any socket
opens: http or https only, no credentials, and every address the host resolves to must pass
``preprocessing.addresses``. The connection then goes to an address that was checked, whatever DNS answers
later (a rebinding name cannot swap in 127.0.0.1 between the check and the connect), while the request keeps
the URL's host for the Host header, SNI and certificate check. One deadline bounds the whole fetch, lookups,
redirects and a server trickling a byte at a time included; the size cap holds while the body streams.
Error messages never carry a URL's ``user:password@`` part.

``post_once`` sends a webhook delivery under the same rules, for one hop only: a redirect is answered back to the
caller, never followed, and no more of the answer's body is read than the caller keeps.
"""

from __future__ import annotations

import functools
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from preprocessing.addresses import AddressPolicy, IPAddress, forbidden_reason, literal_address
from preprocessing.input_errors import InputError
from vlbatch.errors import FETCH_ERROR, NOT_FOUND, TOO_LARGE, UNSUPPORTED_SOURCE, URL_FORBIDDEN

__all__ = ["Answer", "Resolver", "UrlPolicy", "check_url", "fetch_url", "post_once", "redact", "system_resolver"]

# host, port -> the addresses to try, in order
Resolver = Callable[[str, int], Sequence[str]]
_SCHEMES = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_ALLOW_HINT = "allow it with VLBATCH_URL_ALLOW_NETWORKS or VLBATCH_URL_ALLOW_HOSTS"


def system_resolver(host: str, port: int) -> list[str]:
    """The C library's answer for ``host`` (TCP addresses, duplicates dropped, its order kept)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """What a fetch may reach beyond public addresses, how many redirects it follows, and how names resolve."""

    addresses: AddressPolicy = field(default_factory=AddressPolicy)
    max_redirects: int = 5
    resolver: Resolver = system_resolver
    allow_hint: str = _ALLOW_HINT  # the setting that would allow a refused address, named in the refusal


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    if "@" not in rest[:end]:
        return url
    return f"{scheme}://***@{rest[:end].rpartition('@')[2]}{rest[end:]}"


def fetch_url(url: str, *, policy: UrlPolicy, max_bytes: int, timeout_s: float) -> bytes:
    """The body of ``url`` (at most ``max_bytes``), fetched within ``timeout_s`` in all, or ``InputError``."""
    deadline = time.monotonic() + timeout_s
    current = _parse(url)
    for _ in range(policy.max_redirects + 1):
        shown = redact(str(current))
        addresses = _checked_addresses(current, shown, policy, deadline)
        try:
            outcome = _get(current, shown, addresses, deadline, max_bytes)
        except httpx.TimeoutException as exc:
            raise InputError(FETCH_ERROR, f"{shown}: no complete answer within {timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise InputError(FETCH_ERROR, f"{shown}: {type(exc).__name__}: {redact(str(exc))}") from exc
        if isinstance(outcome, bytes):
            return outcome
        current = outcome
    raise InputError(FETCH_ERROR, f"{redact(url)}: more than {policy.max_redirects} redirects")


@dataclass(frozen=True, slots=True)
class Answer:
    """A receiver's answer to ``post_once``: its status, the first bytes of its body, and where a redirect points."""

    status: int
    body: bytes
    location: str | None


def check_url(url: str, *, policy: UrlPolicy, timeout_s: float) -> None:
    """Refuse ``url`` as ``fetch_url`` would before connecting (scheme, credentials, every address its host resolves
    to): ``InputError`` with the code, or None when it may be reached now."""
    parsed = _parse(url)
    _checked_addresses(parsed, redact(str(parsed)), policy, time.monotonic() + timeout_s)


def post_once(
    url: str, *, body: bytes, headers: dict[str, str], policy: UrlPolicy, timeout_s: float, max_answer_bytes: int
) -> Answer:
    """POST ``body`` to ``url`` within ``timeout_s`` in all, to an address checked as ``fetch_url`` checks one; a
    redirect is returned, not followed, and at most ``max_answer_bytes`` of the answer are read."""
    deadline = time.monotonic() + timeout_s
    current = _parse(url)
    shown = redact(str(current))
    addresses = _checked_addresses(current, shown, policy, deadline)
    transport = _PinnedTransport(addresses, deadline)
    remaining = max(0.001, deadline - time.monotonic())
    try:
        with (
            httpx.Client(transport=transport, trust_env=False, follow_redirects=False, timeout=remaining) as client,
            client.stream("POST", current, content=body, headers=headers) as resp,
        ):
            kept = bytearray()
            for chunk in resp.iter_raw():
                kept.extend(chunk[: max_answer_bytes - len(kept)])
                if len(kept) >= max_answer_bytes:
                    break  # the rest is not read: the connection closes with it
            return Answer(resp.status_code, bytes(kept), resp.headers.get("location"))
    except httpx.TimeoutException as exc:
        raise InputError(FETCH_ERROR, f"{shown}: no complete answer within {timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise InputError(FETCH_ERROR, f"{shown}: {type(exc).__name__}: {redact(str(exc))}") from exc


def _parse(url: str | httpx.URL) -> httpx.URL:
    try:
        return url if isinstance(url, httpx.URL) else httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InputError(UNSUPPORTED_SOURCE, f"{redact(str(url))}: not a valid URL ({exc})") from None


def _checked_addresses(url: httpx.URL, shown: str, policy: UrlPolicy, deadline: float) -> list[IPAddress]:
    """The addresses this hop may connect to; ``InputError(url_forbidden)`` before any socket otherwise."""
    if url.scheme not in _SCHEMES:
        raise InputError(URL_FORBIDDEN, f"{shown}: scheme '{url.scheme}' refused; only http and https are fetched")
    if url.userinfo:
        raise InputError(URL_FORBIDDEN, f"{shown}: URLs with credentials are refused; serve the image without them")
    host = url.host
    if not host:
        raise InputError(UNSUPPORTED_SOURCE, f"{shown}: the URL names no host")
    literal = literal_address(host)
    addresses = [literal] if literal is not None else _resolve(host, url.port or _SCHEMES[url.scheme], policy, deadline)
    if policy.addresses.host_allowed(host):
        return addresses
    for address in addresses:
        why = forbidden_reason(address, policy.addresses)
        if why is not None:
            raise InputError(URL_FORBIDDEN, f"{shown}: {host} is {address}, {why}; refused ({policy.allow_hint})")
    return addresses


@functools.cache
def _lookups() -> ThreadPoolExecutor:
    # getaddrinfo takes no timeout; a few threads run it so a fetch can stop waiting at its deadline (a hung
    # lookup finishes in its thread on the C library's own timeout, and never blocks more than these threads).
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="url-lookup")


def _resolve(host: str, port: int, policy: UrlPolicy, deadline: float) -> list[IPAddress]:
    future = _lookups().submit(policy.resolver, host, port)
    try:
        answers = future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        future.cancel()
        raise InputError(FETCH_ERROR, f"looking up {host} took longer than the fetch deadline") from None
    except OSError as exc:
        raise InputError(FETCH_ERROR, f"{host}: cannot resolve ({exc})") from exc
    addresses = [a for a in (literal_address(str(answer)) for answer in answers) if a is not None]
    if not addresses:
        raise InputError(FETCH_ERROR, f"{host}: resolves to no address")
    return addresses


def _get(url: httpx.URL, shown: str, addresses: list[IPAddress], deadline: float, max_bytes: int) -> bytes | httpx.URL:
    """One request to a checked address: the body, or the next URL when the answer is a redirect."""
    transport = _PinnedTransport(addresses, deadline)
    remaining = max(0.001, deadline - time.monotonic())
    with (
        httpx.Client(transport=transport, trust_env=False, follow_redirects=False, timeout=remaining) as client,
        client.stream("GET", url) as resp,
    ):
        if resp.status_code in _REDIRECTS:
            location = resp.headers.get("location")
            if not location:
                raise InputError(FETCH_ERROR, f"{shown}: HTTP {resp.status_code} without a Location")
            try:
                return url.join(location)
            except (httpx.InvalidURL, ValueError) as exc:
                raise InputError(FETCH_ERROR, f"{shown}: redirect to an invalid URL ({exc})") from None
        if resp.status_code == 404:
            raise InputError(NOT_FOUND, f"{shown}: HTTP 404")
        if resp.status_code >= 300:
            raise InputError(FETCH_ERROR, f"{shown}: HTTP {resp.status_code}")
        declared = resp.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise InputError(TOO_LARGE, f"{shown}: Content-Length {declared} > limit {max_bytes}")
        body = bytearray()
        for chunk in resp.iter_bytes():
            body.extend(chunk)
            if len(body) > max_bytes:
                raise InputError(TOO_LARGE, f"{shown}: body exceeds limit {max_bytes}")
    return bytes(body)


# ------------------------------------------------------------------------------ the pinned connection


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Built once per process (loading the CA bundle takes milliseconds), shared by every fetch."""
    return httpx.create_ssl_context(trust_env=False)


class _PinnedTransport(httpx.HTTPTransport):
    """httpx's transport, except that its connections go to ``addresses`` whatever host the URL names."""

    def __init__(self, addresses: list[IPAddress], deadline: float) -> None:
        context = _ssl_context()
        super().__init__(verify=context, trust_env=False)
        # httpx takes no network backend of its own, so the pool is rebuilt with one that dials the checked
        # addresses and holds every socket operation to the fetch's deadline.
        self._pool = httpcore.ConnectionPool(
            ssl_context=context, max_connections=1, network_backend=_PinnedBackend(addresses, deadline)
        )


def _bounded(timeout: float | None, deadline: float, expired: type[Exception]) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise expired("the fetch deadline has passed")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads, writes and TLS handshake each wait no later than the fetch's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, self._deadline, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, self._deadline, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, self._deadline, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Dials the checked addresses in order (the URL's host is only the Host header and the TLS name)."""

    def __init__(self, addresses: Iterable[IPAddress], deadline: float) -> None:
        self._addresses = list(addresses)
        self._deadline = deadline
        self._system = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        failure: Exception = httpcore.ConnectError(f"no address to connect to for {host}")
        for address in self._addresses:
            bounded = _bounded(timeout, self._deadline, httpcore.ConnectTimeout)
            try:
                stream = self._system.connect_tcp(str(address), port, bounded, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("image URLs are not fetched over unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, max(0.0, self._deadline - time.monotonic())))
