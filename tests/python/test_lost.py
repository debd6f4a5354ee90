"""Lost locks: on_lost fires from the watchdog, its exceptions come back, `with` reports loss."""

from __future__ import annotations

import threading

import pytest
import redmutex
from redmutex import LockState

from rmtest_util import wait_until


class Recorder:
    def __init__(self) -> None:
        self.calls = []
        self.lost = threading.Event()
        self.threads = set()
        self.thread_names = set()

    def __call__(self, lock, state) -> None:
        self.calls.append((lock, state))
        self.threads.add(threading.get_ident())
        self.thread_names.add(threading.current_thread().name)
        if state == LockState.LOST:
            self.lost.set()


@pytest.mark.parametrize("kind", ["lock", "rlock"])
def test_on_lost_fires_when_key_is_deleted_behind_the_holders_back(make_client, r, kind):
    c = make_client(watchdog_lease=0.3)
    rec = Recorder()
    lock = getattr(c, kind)("victim", on_lost=rec)
    lock.acquire()
    r.delete("victim")
    assert rec.lost.wait(5), "on_lost was not called"
    assert rec.calls[-1][0] is lock
    assert isinstance(rec.calls[-1][1], LockState) and rec.calls[-1][1] is LockState.LOST
    assert threading.get_ident() not in rec.threads
    # Called on the package's event thread, never on the C watchdog thread
    # (which Python does not know: its name would be "Dummy-N").
    assert all(n.startswith("redmutex-events-") for n in rec.thread_names), rec.thread_names
    assert lock.lost and lock.state is LockState.LOST
    assert lock.validity == 0.0
    # Renewal never re-creates a lost lock.
    assert r.exists("victim") == 0
    with pytest.raises(redmutex.LockLostError):
        lock.release()
    assert lock.state is LockState.UNLOCKED


def test_with_raises_lock_lost_at_exit_but_the_block_ran(make_client, r):
    c = make_client(watchdog_lease=0.3)
    ran = []
    with pytest.raises(redmutex.LockLostError) as info, c.lock("gone") as lock:
        r.delete("gone")
        wait_until(lambda: lock.lost, timeout=5, what="the watchdog to notice")
        ran.append(True)
    assert ran == [True]
    assert "lost" in str(info.value)


def test_with_exit_does_not_mask_the_blocks_exception(make_client, r):
    c = make_client(watchdog_lease=0.3)
    with pytest.raises(ZeroDivisionError) as info, c.lock("masked") as lock:
        r.delete("masked")
        wait_until(lambda: lock.lost, timeout=5, what="the watchdog to notice")
        raise ZeroDivisionError("inside the block")
    notes = getattr(info.value, "__notes__", [])
    if hasattr(BaseException, "add_note"):
        assert any("LockLostError" in n for n in notes)
    assert lock.state is LockState.UNLOCKED  # released (forgotten) all the same


def test_lease_running_out_inside_with_raises_lock_lost(client, r):
    with pytest.raises(redmutex.LockLostError), client.lock("short", lease=0.2) as lock:
        wait_until(lambda: r.exists("short") == 0, timeout=3, what="the lease to end")
        assert lock.ttl is None


def test_exception_in_on_lost_is_reraised_at_the_next_call(make_client, r):
    c = make_client(watchdog_lease=0.3)
    called = threading.Event()

    def bad_callback(lock, state):
        called.set()
        raise RuntimeError(f"callback failed: {state.name}")

    lock = c.lock("cb", on_lost=bad_callback)
    lock.acquire()
    r.delete("cb")
    assert called.wait(5)
    with pytest.raises(RuntimeError, match="callback failed: LOST"):
        lock.locked()
    # Raised once; the lock works afterwards.
    assert lock.state is LockState.LOST
    with pytest.raises(redmutex.LockLostError):
        lock.release()


def test_exception_in_on_lost_is_raised_at_with_exit_after_release(make_client, r):
    c = make_client(watchdog_lease=0.3)
    called = threading.Event()

    def bad_callback(lock, state):
        called.set()
        raise ValueError("from on_lost")

    with pytest.raises(ValueError, match="from on_lost") as info, c.lock("cb2", on_lost=bad_callback):
        r.delete("cb2")
        assert called.wait(5)
    assert isinstance(info.value.__cause__, redmutex.LockLostError)


def test_exception_in_on_lost_is_raised_by_release_after_releasing(client, r):
    seen = threading.Event()

    def bad_callback(lock, state):
        seen.set()
        raise KeyError("late")

    lock = client.lock("cb3", lease=0.2, on_lost=bad_callback)
    lock.acquire()
    assert seen.wait(5), "expiry notice did not fire"
    with pytest.raises(KeyError) as info:
        lock.release()
    assert isinstance(info.value.__cause__, redmutex.LockLostError)
    assert lock.state is LockState.UNLOCKED
    assert lock.acquire(blocking=False)  # usable again, nothing pending
    lock.release()


def test_on_lost_may_release_the_lock(make_client, r):
    c = make_client(watchdog_lease=0.3)
    outcome = []
    done = threading.Event()

    def release_in_callback(lock, state):
        try:
            lock.release()
        except redmutex.LockLostError:
            outcome.append("lost")
        done.set()

    lock = c.lock("cb4", on_lost=release_in_callback)
    lock.acquire()
    r.delete("cb4")
    assert done.wait(5)
    assert outcome == ["lost"]
    assert lock.state is LockState.UNLOCKED


def test_dropped_lock_with_callback_is_collected(make_client, r):
    import gc
    import weakref

    c = make_client(watchdog_lease=0.3)
    lock = c.lock("dropped", on_lost=lambda lk, st: None)
    lock.acquire()
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    assert ref() is None
    # The handle was freed: renewal stopped, so the key expires.
    wait_until(lambda: r.exists("dropped") == 0, timeout=3, what="expiry after the handle was freed")


def test_close_from_on_lost_closes_the_client(make_client, r):
    c = make_client(watchdog_lease=0.3)
    done = threading.Event()
    other = c.lock("cb5-other")
    other.acquire()

    def close_in_callback(lock, state):
        c.close()  # the callback runs on the package's event thread: closing is allowed
        done.set()

    lock = c.lock("cb5", on_lost=close_in_callback)
    lock.acquire()
    r.delete("cb5")
    assert done.wait(5)
    assert c.closed
    assert r.exists("cb5-other") == 0  # the close released the other lock
    with pytest.raises(redmutex.ClosedError):
        _ = lock.state


def test_repr_does_not_consume_a_stored_callback_exception(make_client, r):
    c = make_client(watchdog_lease=0.3)
    called = threading.Event()

    def bad_callback(lock, state):
        called.set()
        raise LookupError("kept")

    lock = c.lock("cb6", on_lost=bad_callback)
    lock.acquire()
    r.delete("cb6")
    assert called.wait(5)
    assert "LOST" in repr(lock)
    with pytest.raises(LookupError, match="kept"):
        lock.acquire(blocking=False)
