"""Leases: one holder at a time across processes sharing a database, until expiry or release.

Every test runs on a SQLite file and on PostgreSQL (``store_url``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy.exc import DBAPIError

from slurmopt.store import Fence, Store

LEASE = "actuator"


@pytest.fixture
def pair(store_url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores (two connection pools) on one database, as two daemons would have."""
    a = Store.open(store_url)
    b = Store(store_url)
    yield a, b
    a.close()
    b.close()


def test_a_second_holder_is_refused_until_the_lease_expires(pair: tuple[Store, Store]) -> None:
    a, b = pair
    assert a.acquire_lease(LEASE, "host-a:100", ttl_s=30, now=1000.0)
    assert not b.acquire_lease(LEASE, "host-b:200", ttl_s=30, now=1010.0)
    assert not b.acquire_lease(LEASE, "host-b:200", ttl_s=30, now=1029.9)
    lease = b.lease(LEASE)
    assert lease is not None and (lease.holder, lease.expires_at) == ("host-a:100", 1030.0)
    # Expired: b takes it over, and a can no longer renew it.
    assert b.acquire_lease(LEASE, "host-b:200", ttl_s=30, now=1030.0)
    assert not a.renew_lease(LEASE, "host-a:100", ttl_s=30, now=1031.0)
    assert not a.acquire_lease(LEASE, "host-a:100", ttl_s=30, now=1031.0)
    lease = a.lease(LEASE)
    assert lease is not None and lease.holder == "host-b:200"


def test_renewal_extends_only_an_unexpired_lease_of_its_holder(pair: tuple[Store, Store]) -> None:
    a, b = pair
    assert a.acquire_lease(LEASE, "a", ttl_s=10, now=0.0)
    assert a.renew_lease(LEASE, "a", ttl_s=10, now=8.0)
    assert not b.acquire_lease(LEASE, "b", ttl_s=10, now=15.0)  # renewed to 18
    assert not b.renew_lease(LEASE, "b", ttl_s=10, now=15.0)  # not b's
    assert not a.renew_lease(LEASE, "a", ttl_s=10, now=18.0)  # expired at 18: lost
    assert not a.renew_lease("other", "a", ttl_s=10, now=1.0)  # never taken
    # Re-acquiring an expired lease nobody else took works.
    assert a.acquire_lease(LEASE, "a", ttl_s=10, now=19.0)


def test_the_holder_may_acquire_again_to_extend(pair: tuple[Store, Store]) -> None:
    a, _ = pair
    assert a.acquire_lease(LEASE, "a", ttl_s=10, now=0.0)
    assert a.acquire_lease(LEASE, "a", ttl_s=10, now=5.0)
    lease = a.lease(LEASE)
    assert lease is not None and lease.expires_at == 15.0


def test_release_frees_the_lease_at_once_but_only_for_its_holder(
    pair: tuple[Store, Store],
) -> None:
    a, b = pair
    assert a.acquire_lease(LEASE, "a", ttl_s=300, now=0.0)
    assert not b.release_lease(LEASE, "b")
    assert not b.acquire_lease(LEASE, "b", ttl_s=300, now=1.0)
    assert a.release_lease(LEASE, "a")
    assert a.lease(LEASE) is None
    assert b.acquire_lease(LEASE, "b", ttl_s=300, now=2.0)
    assert not a.release_lease(LEASE, "a")


def test_leases_are_independent_by_name(pair: tuple[Store, Store]) -> None:
    a, b = pair
    assert a.acquire_lease("actuator", "a", ttl_s=30, now=0.0)
    assert b.acquire_lease("metrics", "b", ttl_s=30, now=0.0)


def test_the_token_grows_by_one_each_time_the_lease_changes_hands(
    pair: tuple[Store, Store],
) -> None:
    a, b = pair
    assert a.acquire_token(LEASE, "a", ttl_s=10, now=0.0) == 1
    assert a.acquire_token(LEASE, "a", ttl_s=10, now=5.0) == 1  # kept: same token
    assert b.acquire_token(LEASE, "b", ttl_s=10, now=9.0) is None
    assert b.acquire_token(LEASE, "b", ttl_s=10, now=15.0) == 2  # a's expired at 15
    assert a.acquire_token(LEASE, "a", ttl_s=10, now=16.0) is None
    assert b.acquire_token(LEASE, "b", ttl_s=10, now=30.0) == 3  # its own, but after expiry
    lease = a.lease(LEASE)
    assert lease is not None and (lease.holder, lease.token) == ("b", 3)


def test_racing_holders_get_exactly_one_winner(store_url: str) -> None:
    """Eight stores (eight connections) race for a new lease at the same instant."""
    url = store_url
    Store.open(url).close()
    stores = [Store(url) for _ in range(8)]
    results: list[bool] = [False] * len(stores)
    start = threading.Barrier(len(stores))

    def race(i: int) -> None:
        start.wait()
        results[i] = stores[i].acquire_lease(LEASE, f"holder-{i}", ttl_s=60, now=100.0)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sum(results) == 1
        lease = stores[0].lease(LEASE)
        assert lease is not None and lease.holder == f"holder-{results.index(True)}"
    finally:
        for s in stores:
            s.close()


@pytest.mark.postgres
def test_a_holder_stopped_inside_a_transaction_does_not_block_the_takeover(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL ends the stopped holder's transaction, so its row lock cannot outlive it."""
    from slurmopt.store import engine

    monkeypatch.setattr(engine, "PG_IDLE_IN_TRANSACTION_S", 1.0)
    a, b = Store.open(pg_url), Store(pg_url)
    assert a.acquire_token(LEASE, "a", ttl_s=10, now=0.0) == 1
    fence = Fence(LEASE, "a", 1, 10, clock=lambda: 5.0)
    stuck = a.sessions()
    stuck.begin()
    fence.check(stuck)  # the lease row is locked until this transaction ends; a stops here
    taken: list[int | None] = []
    started = time.monotonic()
    racer = threading.Thread(target=lambda: taken.append(b.acquire_token(LEASE, "b", 10, 20.0)))
    racer.start()
    racer.join(timeout=20)
    try:
        assert taken == [2], "the takeover waited on the stopped holder's lock"
        assert time.monotonic() - started < 10
        with pytest.raises(DBAPIError):  # a, resumed, finds its transaction gone
            fence.check(stuck)
    finally:
        stuck.close()
        a.close()
        b.close()
