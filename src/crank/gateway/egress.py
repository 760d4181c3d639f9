"""The egress policy: which addresses the gateway may connect to, for upstream calls and admin fetches.

Operations and imported documents name any URL, and whoever defines them is not the operator: without
a policy, a target `http://169.254.169.254/...` would hand a tenant the cloud's metadata service, and
`http://127.0.0.1:8000/admin/v1/...` the gateway's own admin API. So, by default, Crank connects only
to public addresses. Refused unless allowed:

- loopback, link-local, private (RFC 1918, unique local, shared 100.64/10), unspecified, multicast,
  reserved and documentation ranges: every address Python's `ipaddress` does not call global;
- the gateway's own listening ports (`CRANK_LISTEN`), on loopback, on the listening address and on any
  address of this host, even where loopback is allowed.

`CRANK_EGRESS_ALLOW` (comma-separated) allows more: a network (`10.1.0.0/16`, `::1`), one address and
port (`127.0.0.1:9000`, `[::1]:9000`) or a host name and port (`billing.internal:8443`, allowed
whatever it resolves to: the operator named it). An address and port, or a name and port, also open the
gateway's own port (the demo calls the API it serves itself); a network never does.

Checked where the connection is made, on the resolved addresses: a name is resolved once, every
address it resolves to is checked, and the connection goes to a checked address (a DNS answer that
changes between the check and the connection cannot redirect it). At publish, targets whose host is
an address (or `localhost`) are checked too, so that a refused one fails the publish naming the tool.
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

__all__ = ["ALLOW_VARIABLE", "LISTEN_VARIABLE", "EgressPolicy", "LOOPBACK"]

ALLOW_VARIABLE = "CRANK_EGRESS_ALLOW"
LISTEN_VARIABLE = "CRANK_LISTEN"
LOOPBACK = ("127.0.0.0/8", "::1")
"""The allowance of the demo, `crank serve --openapi` with a loopback base URL, and the test suite."""

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


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
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
        name = host.lower().strip("[]")
        for rule in self._rules:
            if rule.port == port and (rule.name == name or (rule.network is not None and address in rule.network)):
                return None  # named with its port: the operator means exactly this one
        if port in self._own_ports and self._is_own(address):
            return f"{_shown(address, port)} is the gateway's own port"
        if any(rule.port is None and rule.network is not None and address in rule.network for rule in self._rules):
            return None
        if not address.is_global or address.is_multicast:
            return f"{_shown(address, port)} is not a public address"
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
