"""`ApiKeys`: a replica's list of API keys, trusted only while the registry confirms it."""

from __future__ import annotations

import logging

import pytest

from crank.exceptions import DependencyUnavailableError
from crank.registry import Changes, Registry, key_digest
from crank.sources.api_keys import ApiKeys


def test_a_list_never_confirmed_or_confirmed_too_long_ago_refuses_every_key_and_says_so_once_an_episode(
    sqlite_registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_registry.create_workspace("acme", "ACME")
    key = sqlite_registry.create_api_key("acme")
    keys = ApiKeys(sqlite_registry, list_max_age=0.0)
    keys.update(sqlite_registry.api_keys(), Changes(0, everything=True))
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
    assert keys.update(sqlite_registry.api_keys(), Changes(0, everything=True)) is False  # nothing was there to lose
    keys.confirmed()
    found = keys.authenticate(revoked)
    assert found is not None and found.workspace == "acme" and found.agents == frozenset({"support"})
    assert keys.authenticate("crk_not-a-key") is None
    sqlite_registry.revoke_api_key(revoked)
    assert keys.update(sqlite_registry.api_keys(), Changes(0, everything=True)) is True
    assert keys.authenticate(revoked) is None and keys.authenticate(kept) is not None
    assert key_digest(kept) in sqlite_registry.api_keys()


def test_an_update_reads_back_only_the_keys_the_changes_name_and_keeps_the_others(sqlite_registry: Registry) -> None:
    sqlite_registry.create_workspace("acme", "ACME")
    sqlite_registry.create_workspace("globex", "Globex")
    acme, globex = sqlite_registry.create_api_key("acme"), sqlite_registry.create_api_key("globex")
    keys = ApiKeys(sqlite_registry)
    keys.update(sqlite_registry.api_keys(), Changes(0, everything=True))
    keys.confirmed()
    since = sqlite_registry.generation()
    sqlite_registry.revoke_api_key(acme)
    added = sqlite_registry.create_api_key("acme", ["support"])
    changes = sqlite_registry.changes_since(since)
    assert changes.keys == {key_digest(acme), key_digest(added)} and not changes.everything
    read = sqlite_registry.api_keys(changes)
    assert set(read) == {key_digest(added)}  # the revoked key is not there to read; globex's was not asked for
    assert keys.update(read, changes) is True  # acme's revoked key is gone
    assert keys.authenticate(acme) is None
    assert keys.authenticate(globex) is not None  # kept without being read again
    found = keys.authenticate(added)
    assert found is not None and found.agents == frozenset({"support"})
