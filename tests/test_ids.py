"""Request ids: 32 hex digits from the operating system's randomness, never the same in a forked child."""

from __future__ import annotations

import os
import re

from crank.ids import new_request_id


def test_ids_are_32_hex_digits_and_distinct() -> None:
    ids = [new_request_id() for _ in range(2000)]  # several draws of the batch
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    new_request_id()  # the parent holds a drawn batch
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's coverage is not collected)
        os.write(writing, new_request_id().encode())
        os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    childs = os.read(reading, 64).decode()
    os.close(reading)
    assert childs != new_request_id()
