"""Budgets of work anyone may ask for (`crank.wire.budgets`): whose request it is, and how much each may spend."""

from __future__ import annotations

import time

import pytest

from crank.wire.budgets import NO_ADDRESS, Budget, KeyedBudgets, client_address


@pytest.mark.parametrize(
    ("client", "address"),
    [
        (("203.0.113.7", 5000), "203.0.113.7"),
        (("2001:db8:1:2:3:4:5:6", 5000), "2001:db8:1:2::/64"),  # one subscriber's network counts as one
        (("2001:db8:1:2:ffff::1", 5000), "2001:db8:1:2::/64"),
        (("::ffff:198.51.100.9", 5000), "198.51.100.9"),  # an IPv4 client on a dual-stack socket
        (("fe80::1%eth0", 5000), "fe80::/64"),
        (None, NO_ADDRESS),  # a Unix socket: the server says nothing
        (["10.0.0.1", 1], "10.0.0.1"),
    ],
)
def test_a_client_is_its_ipv4_address_or_its_ipv6_network(client: object, address: str) -> None:
    assert client_address({"client": client}) == address


def test_each_key_has_a_budget_of_its_own_that_refills() -> None:
    budgets = KeyedBudgets(rate=1000.0, burst=3)
    assert [budgets.take("mallory") for _ in range(4)] == [True, True, True, False]
    assert not budgets.left("mallory")
    assert budgets.left("victim") and budgets.take("victim")  # another key's is whole
    time.sleep(0.01)  # 1,000 a second: refilled
    assert budgets.left("mallory") and budgets.take("mallory")


def test_past_its_bound_a_flood_of_new_keys_shares_one_budget_and_a_whole_one_is_forgotten() -> None:
    budgets = KeyedBudgets(rate=0.001, burst=1, max_keys=2)
    assert budgets.take("a") and not budgets.take("a")
    assert budgets.take("b")
    # "a" and "b" still spend: "c", "d" and every newcomer share one budget instead of a fresh one each.
    assert budgets.take("c") and not budgets.take("d") and not budgets.left("e")
    assert not budgets.take("a")  # and "a" was not forgotten
    refilling = KeyedBudgets(rate=1000.0, burst=1, max_keys=1)
    assert refilling.take("a")
    time.sleep(0.01)  # "a" is whole again: forgotten for a newcomer, which gets a budget of its own
    assert refilling.take("b") and refilling.take("a")


def test_a_budget_never_holds_more_than_its_burst() -> None:
    budget = Budget(rate=1.0, burst=2)
    time.sleep(0.01)
    assert [budget.take() for _ in range(3)] == [True, True, False]
