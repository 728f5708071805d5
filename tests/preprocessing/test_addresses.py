"""Every block of IANA's special-purpose registries that is not globally reachable is refused, at both ends, and
the globally reachable exceptions inside them are not."""

from __future__ import annotations

import ipaddress

import pytest

from preprocessing.addresses import AddressPolicy, forbidden_reason

# IANA IPv4 and IPv6 Special-Purpose Address Registries, "Globally Reachable: False" (and deprecated) rows, written
# out here by hand rather than read from the module under test.
NOT_PUBLIC = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/29",
    "192.0.0.8/32",
    "192.0.0.170/32",
    "192.0.0.171/32",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "64:ff9b:1::/48",
    "100::/64",
    "100:0:0:1::/64",
    "2001:2::/48",
    "2001:10::/28",
    "2001:db8::/32",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
]

# Globally reachable, some of them inside the blocks above (IANA lists them as exceptions), and ordinary hosts.
PUBLIC = ["192.0.0.9", "192.0.0.10", "192.31.196.1", "192.52.193.1", "192.175.48.1", "8.8.8.8", "1.1.1.1",
          "2620:4f:8000::1", "2606:4700:4700::1111", "2a00:1450:4001::1"]  # fmt: skip


@pytest.mark.parametrize("block", NOT_PUBLIC)
def test_every_special_purpose_block_is_refused_at_both_ends(block: str) -> None:
    net = ipaddress.ip_network(block)
    for address in (net.network_address, net.broadcast_address):
        assert forbidden_reason(address, AddressPolicy()) is not None, address


@pytest.mark.parametrize("address", ["fec0::1", "192.0.0.8", "192.88.99.1", "3fff::1"])
def test_the_blocks_python_counts_as_global_are_refused(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address), AddressPolicy()) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_globally_reachable_addresses_stay_allowed(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address), AddressPolicy()) is None


def test_an_allowed_network_still_opens_a_special_block() -> None:
    policy = AddressPolicy.of(networks=["fec0::/10"])
    assert forbidden_reason(ipaddress.ip_address("fec0::1"), policy) is None
