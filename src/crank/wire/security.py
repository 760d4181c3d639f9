"""DNS-rebinding protection: the `Host` and `Origin` checks of Streamable HTTP.

transports.mdx §Security Warning: servers MUST validate `Origin`; a present and invalid `Origin` is
403. A `Host` outside the allowed list is 421 (Misdirected Request), as the official SDK answers.
Protection is on by default when the server socket is a loopback address, where a browser page on
another site is the attack this stops; elsewhere a reverse proxy usually owns the `Host` header.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_HOSTS", "HostOriginPolicy", "is_loopback"]

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


@lru_cache(maxsize=256)
def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hostname(authority: str) -> str:
    """`example.com:8080` -> `example.com`; `[::1]:80` -> `[::1]`."""
    if authority.startswith("["):
        return authority.split("]", 1)[0] + "]"
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


_VERDICT_CACHE_SIZE = 4096


@dataclass(frozen=True)
class HostOriginPolicy:
    """Which `Host` and `Origin` values a server accepts.

    `protection`: True, False, or None for "on when the server socket is loopback".
    `allowed_hosts`: extra host names (without port) accepted besides the loopback names.
    `allowed_origins`: extra origins (`https://app.example.com`) accepted besides same-origin requests.
    """

    protection: bool | None = None
    allowed_hosts: frozenset[str] = frozenset()
    allowed_origins: frozenset[str] = frozenset()
    # Verdicts by (server address, Host, Origin): a server sees few distinct triples, and this runs on
    # every request. Bounded: cleared when full, so random Host values cannot grow it.
    _verdicts: dict[tuple[str | None, str | None, str | None], int | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def build(
        cls, protection: bool | None, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]
    ) -> HostOriginPolicy:
        return cls(
            protection,
            frozenset(host.lower() for host in allowed_hosts),
            frozenset(origin.lower().rstrip("/") for origin in allowed_origins),
        )

    def enabled(self, server: tuple[str, int] | None) -> bool:
        if self.protection is not None:
            return self.protection
        return server is not None and is_loopback(server[0])

    def check(self, server: tuple[str, int] | None, host: str | None, origin: str | None) -> int | None:
        """The HTTP status to refuse the request with, or None to let it through."""
        key = (server[0] if server else None, host, origin)
        try:
            return self._verdicts[key]
        except KeyError:
            pass
        verdict = self._decide(server, host, origin)
        if len(self._verdicts) >= _VERDICT_CACHE_SIZE:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        return verdict

    def _decide(self, server: tuple[str, int] | None, host: str | None, origin: str | None) -> int | None:
        protected = self.enabled(server)
        if protected and not self._host_allowed(host):
            return 421
        if origin is not None and not self._origin_allowed(origin, host, protected):
            return 403
        return None

    def _host_allowed(self, host: str | None) -> bool:
        # Host names on the wire are ASCII (IDNA): anything else is refused, whichever codec read the header
        # (`str.lower` would map some non-ASCII letters to ASCII ones: the Kelvin sign to `k`).
        if not host or not host.isascii():
            return False
        name = _hostname(host.lower())
        return name in LOOPBACK_HOSTS or name in self.allowed_hosts

    def _origin_allowed(self, origin: str, host: str | None, protected: bool) -> bool:
        if not origin.isascii():  # as for the host
            return False
        origin = origin.lower().rstrip("/")
        if origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        if host is not None and parts.netloc == host.lower():
            return True  # same origin
        name = _hostname(parts.netloc)
        return protected and (name in LOOPBACK_HOSTS or name in self.allowed_hosts)
