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

# IANA's special-purpose address registries (IPv4 and IPv6), the blocks marked not globally reachable, and the
# deprecated ones that no public host answers on. Python's own table lags behind the registry and differs between
# its versions (3.11 counts fec0::/10, 192.0.0.8 and 192.88.99.0/24 as global), so the registry is spelt out here
# and judged first; the ``ipaddress`` properties still catch what this list leaves out. The globally reachable
# exceptions inside these blocks (192.0.0.9, 192.0.0.10, AS112, AMT) are not listed: they are public.
SPECIAL_PURPOSE: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/29", "IETF protocol assignment (DS-Lite)"),
    ("192.0.0.8/32", "IETF protocol assignment (IPv4 dummy address)"),
    ("192.0.0.170/31", "IETF protocol assignment (NAT64/DNS64 discovery)"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy IPv6 prefix"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "deprecated ORCHID"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "deprecated site-local"),
    ("ff00::/8", "multicast"),
)
_SPECIAL = tuple((ipaddress.ip_network(net), why) for net, why in SPECIAL_PURPOSE)


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
    listed = next((why for net, why in _SPECIAL if net.version == address.version and address in net), None)
    if listed is not None:
        return listed
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
