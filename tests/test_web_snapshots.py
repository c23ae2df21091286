"""Stale-while-revalidate for the Status page: served at once from the last snapshot, refreshed
in the background when older than its age limit, fresh on demand."""

import threading

from memvault.cli.web.snapshots import StaleWhileRevalidate
from tests.web_helpers import poll

# The snapshot cache is tested with a fake compute function: no vault, no index, so these stay local.


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_first_load_computes_then_serves_the_snapshot():
    calls = []
    clock = Clock()
    cache = StaleWhileRevalidate(lambda: calls.append(1) or {"n": len(calls)}, max_age=5, clock=clock)
    assert cache.get() == ({"n": 1}, 0.0)
    clock.now += 3
    assert cache.get() == ({"n": 1}, 3.0)
    assert len(calls) == 1


def test_a_stale_snapshot_is_served_while_one_thread_refreshes_it():
    release = threading.Event()
    calls = []
    clock = Clock()

    def compute():
        calls.append(1)
        if len(calls) > 1:
            release.wait(60)
        return {"n": len(calls)}

    cache = StaleWhileRevalidate(compute, max_age=5, clock=clock)
    cache.get()
    clock.now += 10
    assert cache.get()[0] == {"n": 1}  # stale, served at once
    assert cache.get()[0] == {"n": 1}  # a second stale load starts no second refresh
    release.set()
    poll(lambda: cache.get()[0] == {"n": 2}, what="the background refresh")
    assert len(calls) == 2


def test_fresh_waits_for_a_new_snapshot():
    calls = []
    cache = StaleWhileRevalidate(lambda: calls.append(1) or {"n": len(calls)}, max_age=5, clock=Clock())
    cache.get()
    assert cache.get(fresh=True) == ({"n": 2}, 0.0)
