"""Which network addresses a URL fetch may reach: public ones, plus whatever the operator allows.

A URL in a job is written by a client, and the worker that fetches it sits inside the operator's network, so
by default it may only reach globally routable unicast addresses: loopback, private, link-local, carrier-grade
NAT, multicast, reserved and unspecified ranges are refused, also when they hide inside an IPv6 address
(IPv4-mapped, 6to4, Teredo, NAT64) or are spelt the legacy ways ``inet_aton`` accepts (``2130706433``,
``0x7f.1``, ``127.1``, ``0177.0.0.1``). Pure functions, standard library only.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["AddressPolicy", "IPAddress", "IPNetwork", "forbidden_reason", "literal_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Not global, but Python's ipaddress (3.11) does not list it as private either.
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """What a fetch may connect to beyond public addresses: ``networks`` (any address inside one is allowed)
    and ``hosts`` (URL host names whose resolved addresses are all allowed, matched without case)."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, networks: Iterable[IPNetwork | str] = (), hosts: Iterable[str] = ()) -> AddressPolicy:
        nets = tuple(n if not isinstance(n, str) else ipaddress.ip_network(n, strict=False) for n in networks)
        return cls(networks=nets, hosts=frozenset(h.lower().rstrip(".") for h in hosts))

    def host_allowed(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def address_allowed(self, address: IPAddress) -> bool:
        return any(address in net for net in self.networks if net.version == address.version)


def literal_address(host: str) -> IPAddress | None:
    """The address a URL host spells directly (any form the C library would accept), or None for a name."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])  # an IPv6 zone id names no other address
    except ValueError:
        pass
    try:
        # inet_aton takes the shorthand and octal/hex forms getaddrinfo would also accept.
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _reason(address: IPAddress) -> str | None:
    checks = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "carrier-grade NAT"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "not globally routable"),
    )
    return next((why for hit, why in checks if hit), None)


def forbidden_reason(address: IPAddress, policy: AddressPolicy) -> str | None:
    """Why ``address`` may not be reached (e.g. ``"loopback"``), or None when it may."""
    if policy.address_allowed(address):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:  # the packets end up at the IPv4 address, so that is the one to judge
            why = forbidden_reason(inner, policy)
            return None if why is None else f"{why} ({inner} inside {address})"
    return _reason(address)
