"""The stored-responses table on plain data: the least recently used goes first, owners do not see each other's
entries, capacity 0 keeps nothing, and what is stored is a copy."""

from __future__ import annotations

import asyncio

import pytest

from lexi.http.responses.store import ResponseStore, owner_of


def body(response_id: str) -> dict:
    return {"id": response_id, "object": "response", "output": [{"type": "message", "content": [response_id]}]}


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_least_recently_used_goes_first_and_a_read_is_a_use():
    store = ResponseStore(2)
    run(store.put("a", body("r1"), []))
    run(store.put("a", body("r2"), []))
    assert run(store.get("r1", "a")) is not None  # r2 is now the least recently used
    run(store.put("a", body("r3"), []))
    assert [run(store.get(i, "a")) is not None for i in ("r1", "r2", "r3")] == [True, False, True]
    assert run(store.size()) == 2


def test_another_owner_finds_nothing_and_cannot_delete():
    store = ResponseStore(4)
    run(store.put("a", body("r1"), [{"role": "user", "content": "hi"}]))
    assert run(store.get("r1", "b")) is None and run(store.delete("r1", "b")) is False
    entry = run(store.get("r1", "a"))
    assert entry.history() == [{"role": "user", "content": "hi"}, *body("r1")["output"]]
    assert run(store.delete("r1", "a")) is True and run(store.get("r1", "a")) is None
    assert run(store.delete("r1", "a")) is False


def test_capacity_zero_keeps_nothing_and_entries_are_copies():
    store = ResponseStore(0)
    run(store.put("a", body("r1"), []))
    assert run(store.get("r1", "a")) is None and run(store.size()) == 0
    store = ResponseStore(1)
    items = [{"role": "user", "content": "hi"}]
    kept = body("r1")
    run(store.put("a", kept, items))
    kept["output"].clear()
    items.clear()
    assert run(store.get("r1", "a")).history() == [{"role": "user", "content": "hi"}, *body("r1")["output"]]
    with pytest.raises(ValueError, match="--responses-store"):
        ResponseStore(-1)


def test_owners_are_digests_of_the_key_and_one_owner_without_keys():
    assert owner_of("Bearer sk-1", keyed=False) == owner_of(None, keyed=False) == ""
    assert (
        owner_of("Bearer sk-1", keyed=True)
        == owner_of("bearer  sk-1 ", keyed=True)
        != owner_of("Bearer sk-2", keyed=True)
    )
    assert "sk-1" not in owner_of("Bearer sk-1", keyed=True)
