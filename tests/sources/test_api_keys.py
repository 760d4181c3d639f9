"""`ApiKeys`: a replica's list of API keys, trusted only while the registry confirms it."""

from __future__ import annotations

import logging

import pytest

from crank.exceptions import DependencyUnavailableError
from crank.registry import Registry, key_digest
from crank.sources.api_keys import ApiKeys


def test_a_list_never_confirmed_or_confirmed_too_long_ago_refuses_every_key_and_says_so_once_an_episode(
    sqlite_registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_registry.create_workspace("acme", "ACME")
    key = sqlite_registry.create_api_key("acme")
    keys = ApiKeys(sqlite_registry, list_max_age=0.0)
    keys.replace(sqlite_registry.api_keys())
    with pytest.raises(DependencyUnavailableError):  # loaded, but never confirmed
        keys.authenticate(key)
    keys.confirmed()  # trusted for 0 s: stale at once, a new episode
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crank.gateway"):
        for _ in range(3):
            with pytest.raises(DependencyUnavailableError) as refused:
                keys.authenticate(key)
    assert refused.value.retry_after > 0
    assert len([r for r in caplog.records if "has not confirmed the API keys" in r.getMessage()]) == 1
    assert keys.authenticate(None) is None  # no key: nothing to refuse (the authenticator asks for one)


def test_a_confirmed_list_knows_its_keys_and_a_replacement_tells_of_revoked_ones(sqlite_registry: Registry) -> None:
    sqlite_registry.create_workspace("acme", "ACME")
    kept, revoked = sqlite_registry.create_api_key("acme"), sqlite_registry.create_api_key("acme", ["support"])
    keys = ApiKeys(sqlite_registry)
    assert keys.replace(sqlite_registry.api_keys()) is False  # nothing was there to lose
    keys.confirmed()
    found = keys.authenticate(revoked)
    assert found is not None and found.workspace == "acme" and found.agents == frozenset({"support"})
    assert keys.authenticate("crk_not-a-key") is None
    sqlite_registry.revoke_api_key(revoked)
    assert keys.replace(sqlite_registry.api_keys()) is True
    assert keys.authenticate(revoked) is None and keys.authenticate(kept) is not None
    assert key_digest(kept) in sqlite_registry.api_keys()
