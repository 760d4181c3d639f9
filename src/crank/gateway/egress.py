"""The egress policy: which addresses the gateway may connect to, for upstream calls and admin fetches.

Operations and imported documents name any URL, and whoever defines them is not the operator: without
a policy, a target `http://169.254.169.254/...` would hand a tenant the cloud's metadata service, and
`http://127.0.0.1:8000/admin/v1/...` the gateway's own admin API. So, by default, Crank connects only
to public addresses. Refused unless allowed:

- loopback, link-local, private (RFC 1918, unique local, shared 100.64/10), unspecified, multicast,
  reserved, benchmarking and documentation ranges, and IPv6 site-local (fec0::/10): the explicit list
  `DENIED` below, and anything else Python's `ipaddress` does not call global (its meaning changed
  across patch versions; the list does not);
- an IPv6 address that carries an IPv4 one is judged by the IPv4 address it ends up at: IPv4-mapped
  (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96, and the local-use 64:ff9b:1::/48,
  refused whatever it carries), 6to4 (2002::/16) and Teredo (its client address);
- the gateway's own listening ports (`CRANK_LISTEN`), on loopback, on the listening address and on any
  address of this host, even where loopback is allowed.

`CRANK_EGRESS_ALLOW` (comma-separated) allows more: a network (`10.1.0.0/16`, `::1`), one address and
port (`127.0.0.1:9000`, `[::1]:9000`) or a host name and port (`billing.internal:8443`, allowed
whatever it resolves to: the operator named it). An address and port, or a name and port, also open the
gateway's own port (the demo calls the API it serves itself); a network never does.

Checked where the connection is made, on the resolved addresses: a name is resolved once, every
address it resolves to is checked, and the connection goes to a checked address (a DNS answer that
changes between the check and the connection cannot redirect it). At publish, targets whose host is
an address are checked too, so that a refused one fails the publish naming the tool; a target whose host
is a name, `localhost` included, is checked only when a call connects (what it resolves to is the
serving host's answer, not the publisher's).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import urlsplit

from crank.exceptions import ConfigurationError, UpstreamRefusedError
from crank.wire.listen import DEFAULT_LISTEN

__all__ = ["ALLOW_VARIABLE", "DENIED", "LISTEN_VARIABLE", "EgressPolicy", "LOOPBACK"]

ALLOW_VARIABLE = "CRANK_EGRESS_ALLOW"
LISTEN_VARIABLE = "CRANK_LISTEN"
LOOPBACK = ("127.0.0.0/8", "::1")
"""The allowance of the demo, `crank serve --openapi` with a loopback base URL, and the test suite."""

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

DENIED: tuple[Network, ...] = tuple(ipaddress.ip_network(network) for network in (
    # IPv4 (RFC 6890 and its updates)
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
    "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4",
    # IPv6; the ranges that carry an IPv4 address are judged by it first (`_carried`) and listed for the rest
    "::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
    "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
))  # fmt: skip
"""Ranges refused unless allowed: never a public upstream."""
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


@dataclass(frozen=True, slots=True)
class _Rule:
    network: Network | None = None  # an address range, or None for a host name
    name: str | None = None  # a host name, lower case
    port: int | None = None  # None: any port (networks only)


class EgressPolicy:
    """What the gateway may connect to. `allow`: entries as `CRANK_EGRESS_ALLOW` takes them; `listen`:
    the host:port addresses the gateway itself listens on. A bad entry is a `ConfigurationError`."""

    def __init__(self, allow: Iterable[str] = (), *, listen: Iterable[str] = ()) -> None:
        self.allow = tuple(entry.strip() for entry in allow if entry.strip())
        self._rules = tuple(_rule(entry) for entry in self.allow)
        own = [_host_port(address, LISTEN_VARIABLE) for address in listen]
        self._own_ports = frozenset(port for _, port in own)
        self._own_hosts = frozenset(_address(host) for host, _ in own if _address(host) is not None)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EgressPolicy:
        """The policy of `CRANK_EGRESS_ALLOW` and `CRANK_LISTEN` (127.0.0.1:8000 when unset)."""
        environ = os.environ if environ is None else environ
        allow = environ.get(ALLOW_VARIABLE, "").split(",")
        return cls(allow, listen=[environ.get(LISTEN_VARIABLE) or DEFAULT_LISTEN])

    def refusal(self, host: str, address: Address, port: int) -> str | None:
        """Why a connection to `address`:`port` (resolved from `host`) is refused, or None if it is allowed."""
        carried = _carried(address)  # ::ffff:127.0.0.1, ::7f00:1 and 2002:7f00:1:: end up at 127.0.0.1
        judged = (address,) if carried is None else (address, carried)
        shown = _shown(address, port) + ("" if carried is None else f" ({carried})")
        name = host.lower().strip("[]")
        for rule in self._rules:
            if rule.port == port and (rule.name == name or _within(judged, rule.network)):
                return None  # named with its port: the operator means exactly this one
        if port in self._own_ports and any(self._is_own(each) for each in judged):
            return f"{shown} is the gateway's own port"
        if any(rule.port is None and _within(judged, rule.network) for rule in self._rules):
            return None
        if _denied(carried if carried is not None else address) or address in _LOCAL_NAT64:
            return f"{shown} is not a public address"
        return None

    def _is_own(self, address: Address) -> bool:
        return address.is_loopback or address.is_unspecified or address in self._own_hosts or _is_local(address)

    def target_refusal(self, url: str) -> str | None:
        """Why a target URL whose host is an address is refused, or None (a host name is checked when the
        connection is made, on what it resolves to)."""
        parts = urlsplit(url)
        address = _address(parts.hostname or "")
        if address is None:
            return None
        reason = self.refusal(str(address), address, parts.port or (443 if parts.scheme == "https" else 80))
        return _refused(reason) if reason is not None else None

    def check_target(self, url: str, *, where: str) -> None:
        """At publish: a target address this policy refuses is a `ConfigurationError` naming the place."""
        reason = self.target_refusal(url)
        if reason is not None:
            raise ConfigurationError(f"{where}: target url: {reason}")

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses of `host` that may be connected to, in the resolver's order; an `OSError` when the
        name does not resolve, `UpstreamRefusedError` when none of its addresses is allowed."""
        literal = _address(host)
        if literal is not None:
            found = [literal]
        else:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            found = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
        allowed, reasons = [], []
        for address in found:
            reason = self.refusal(host, address, port)
            if reason is None:
                allowed.append(str(address))
            else:
                reasons.append(reason)
        if not allowed:
            raise UpstreamRefusedError(_refused(reasons[0]))
        return allowed


def _refused(reason: str) -> str:
    return f"{reason}; this server's egress policy refuses it ({ALLOW_VARIABLE}, docs/security.md)"


def _rule(entry: str) -> _Rule:
    """One `CRANK_EGRESS_ALLOW` entry: a network, an address and port, or a host name and port."""
    try:
        return _Rule(network=ipaddress.ip_network(entry, strict=False))
    except ValueError:
        pass
    host, port = _host_port(entry, ALLOW_VARIABLE)
    address = _address(host)
    if address is not None:
        return _Rule(network=ipaddress.ip_network(address), port=port)
    return _Rule(name=host.lower(), port=port)


def _host_port(entry: str, variable: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/@ "):
        raise ConfigurationError(
            f"{variable}: {entry!r} is not a network (10.0.0.0/8, ::1), an address and port (127.0.0.1:9000, "
            "[::1]:9000) or a host name and port (api.internal:8443)"
        )
    return host, int(port)


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _carried(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, where a connection to it ends up; None for any other."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client, behind the relay
    value = int(address)
    if address in _NAT64 or address in _LOCAL_NAT64 or (value >> 32 == 0 and value > 1):  # ::, ::1 are IPv6's own
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def _within(addresses: tuple[Address, ...], network: Network | None) -> bool:
    return network is not None and any(address in network for address in addresses)


def _denied(address: Address) -> bool:
    """Whether the address is never a public upstream: in `DENIED`, or not global to Python's `ipaddress`."""
    return any(address in network for network in DENIED) or not address.is_global


def _is_local(address: Address) -> bool:
    """Whether `address` belongs to this host: only a local address can be bound (a cheap, exact test,
    made only for the gateway's own ports)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def _shown(address: Address, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
