"""The threading.Lock contract the README promises, checked by CPython's own
lock tests (Lib/test/lock_tests.py: Debian's libpython3.11-testsuite, or the
interpreter's own test package) run against every kind of redmutex lock, and
threading.Condition over the reentrant kinds; then the asyncio.Lock cases of
CPython's test_asyncio/test_locks.py that apply, ported to redmutex.asyncio
(whose release() and locked() are awaited round trips, so those tests cannot
take an AsyncLock as they are).

Every case passes, or is listed in NOT_APPLICABLE with the reason - the same
list docs/python.md shows (test_documented_exceptions_are_the_skipped_ones).
Each lock is made on a fresh name against the test's redis-server.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import os
import re
import sys
import threading
import unittest
import uuid

import pytest
import redmutex
from redmutex.asyncio import AsyncClient


def _load_lock_tests():
    """CPython's Lib/test/lock_tests.py: Debian's (libpython3.X-testsuite) for
    this Python version, else the interpreter's own test package."""
    path = f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/test/lock_tests.py"
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location("lock_tests", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        from test import lock_tests

        return lock_tests
    except ImportError:
        pytest.fail(
            f"CPython's lock tests are missing ({path}): apt-get install "
            f"libpython{sys.version_info[0]}.{sys.version_info[1]}-testsuite (scripts/deps.sh does)",
            pytrace=False,
        )


lock_tests = _load_lock_tests()

# The cases that do not apply to a kind, and why (docs/python.md shows this list).
NOT_APPLICABLE = {
    "Lock.test_at_fork_reinit": (
        "_at_fork_reinit() is the hook CPython's own locks get from fork(); a redmutex lock "
        "needs none: after fork the child cannot release or renew the parent's hold (ForkedError)"
    ),
    "ReadLock.test_try_acquire_contended": "readers share the lock: a second reader gets it",
    "ReadLock.test_acquire_contended": "readers share the lock: other readers do not wait",
    "ReadLock.test_timeout": "readers share the lock: a second reader gets it at once, without waiting",
    "asyncio.ConditionTests": (
        "asyncio.Condition(lock) calls lock.locked() and lock.release() without awaiting them; "
        "redmutex.asyncio's are round trips, awaited"
    ),
    "ConditionAsRLock.test_recursion_count": (
        "threading.Condition does not expose _recursion_count() (CPython skips this case for "
        "Condition too); the redmutex lock it wraps does"
    ),
}

_client: redmutex.Client | None = None
_names = itertools.count()
_prefix = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module", autouse=True)
def contract_client(redis_server):
    """One client for the module's locks, on the session's redis-server."""
    global _client
    _client = redmutex.Client(redis_server.url)
    yield _client
    _client.close()
    _client = None


def fresh(kind: str) -> str:
    return f"contract:{_prefix}:{kind}:{next(_names)}"


def make(kind: str):
    client = _client
    if kind in ("read", "write"):
        return getattr(client.rwlock(fresh(kind)), kind)
    return getattr(client, kind)(fresh(kind))


def _not_applicable(cls: type, side: str) -> type:
    """Skips, with its reason, every case of cls that NOT_APPLICABLE lists for it."""
    for attr in dir(cls):
        reason = NOT_APPLICABLE.get(f"{side}.{attr}") or NOT_APPLICABLE.get(attr)
        if attr.startswith("test") and reason:
            setattr(cls, attr, unittest.skip(reason)(getattr(cls, attr)))
    return cls


# ---- threading: Lock and RLock ------------------------------------------------


class PlainLockTests(lock_tests.LockTests):
    """client.lock(): threading.Lock's contract (owned by the lock object)."""

    locktype = staticmethod(lambda: make("lock"))


_not_applicable(PlainLockTests, "Lock")


def _rlock_tests(kind: str, side: str):
    class Tests(lock_tests.RLockTests):
        locktype = staticmethod(lambda: make(kind))

    Tests.__name__ = Tests.__qualname__ = f"{side}Tests"
    Tests.__doc__ = f"client.{kind}: threading.RLock's contract (owned by the thread)."
    return _not_applicable(Tests, side)


RLockTests = _rlock_tests("rlock", "RLock")
FairLockTests = _rlock_tests("fair_lock", "FairLock")
ReadLockTests = _rlock_tests("read", "ReadLock")
WriteLockTests = _rlock_tests("write", "WriteLock")


# ---- threading.Condition over the reentrant kinds ---------------------------------


def _condition_tests(kind: str, side: str):
    class Tests(lock_tests.ConditionTests):
        condtype = staticmethod(lambda lock=None: threading.Condition(make(kind) if lock is None else lock))

    Tests.__name__ = Tests.__qualname__ = f"{side}ConditionTests"
    Tests.__doc__ = f"threading.Condition(client.{kind}(name)): Condition's contract."
    return _not_applicable(Tests, side)


RLockConditionTests = _condition_tests("rlock", "RLock")
FairLockConditionTests = _condition_tests("fair_lock", "FairLock")
WriteLockConditionTests = _condition_tests("write", "WriteLock")


class RLockConditionAsRLockTests(lock_tests.RLockTests):
    """threading.Condition(client.rlock(name)) used as the RLock it wraps (as CPython tests Condition)."""

    locktype = staticmethod(lambda: threading.Condition(make("rlock")))


_not_applicable(RLockConditionAsRLockTests, "ConditionAsRLock")


# ---- the documentation -------------------------------------------------------------


def test_documented_exceptions_are_the_skipped_ones():
    """docs/python.md lists exactly the cases skipped here, with these reasons."""
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    section = text.split("<!-- lock-contract-not-applicable -->")[1].split("\n\n")[1]
    rows = dict(re.findall(r"^\| `([\w.]+)` \| (.+?) \|$", section, flags=re.M))
    assert rows == NOT_APPLICABLE


# ---- asyncio: CPython's test_asyncio/test_locks.py LockTests, ported ---------------
#
# asyncio.Lock is owned by the lock object, like AsyncLock (client.lock()); its
# release() and locked() are plain calls where AsyncLock's are awaited round
# trips, and sleep(0) steps become waits for the condition with a deadline.

ASYNC_REPR = re.compile(
    r"^<(?P<class>.*?) object at (?P<address>.*?)\[(?P<extras>(set|unset|locked|unlocked)"
    r"(, value:\d)?(, waiters:\d+)?)\]>\Z"
)


def _arun(redis_server, body):
    async def main():
        async with AsyncClient(redis_server.url) as client:
            await body(client)
            assert not client._waits

    asyncio.run(main())


async def _until(predicate, what, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _amake(client, kind):
    if kind in ("read", "write"):
        return getattr(client.rwlock(fresh(kind)), kind)
    return getattr(client, kind)(fresh(kind))


@pytest.mark.parametrize("kind", ["lock", "rlock", "fair_lock", "read", "write"])
def test_asyncio_repr(redis_server, kind):
    async def body(client):
        lock = _amake(client, kind)
        assert repr(lock).endswith("[unlocked]>") and ASYNC_REPR.match(repr(lock)), repr(lock)
        await lock.acquire()
        assert repr(lock).endswith("[locked]>") and ASYNC_REPR.match(repr(lock)), repr(lock)
        await lock.release()

    _arun(redis_server, body)


def test_asyncio_lock_is_not_awaitable_and_takes_no_loop(redis_server):
    async def body(client):
        lock = _amake(client, "lock")
        with pytest.raises(TypeError, match="can't be used in 'await' expression"):
            await lock
        with pytest.raises(TypeError, match="can't be used in 'await' expression"), await lock:
            pass
        with pytest.raises(TypeError, match="unexpected keyword argument 'loop'"):
            client.lock(fresh("lock"), loop=asyncio.get_running_loop())
        assert not await lock.locked()

    _arun(redis_server, body)


def test_asyncio_acquire_serves_waiting_tasks_in_order(redis_server):
    async def body(client):
        lock = _amake(client, "lock")
        result = []
        assert await lock.acquire()

        async def c(n):
            if await lock.acquire():
                result.append(n)
            return True

        t1 = asyncio.create_task(c(1))
        await _until(lambda: len(client._waits) == 1, "t1 to wait")
        t2 = asyncio.create_task(c(2))
        await _until(lambda: len(client._waits) == 2, "t2 to wait")
        assert result == []
        await lock.release()
        await _until(lambda: result == [1], "t1 to get it")
        t3 = asyncio.create_task(c(3))
        await _until(lambda: len(client._waits) == 2, "t3 to wait")
        await lock.release()
        await _until(lambda: result == [1, 2], "t2 to get it")
        await lock.release()
        await _until(lambda: result == [1, 2, 3], "t3 to get it")
        assert all([await t1, await t2, await t3])
        await lock.release()

    _arun(redis_server, body)


def test_asyncio_acquire_cancel(redis_server):
    async def body(client):
        lock = _amake(client, "lock")
        assert await lock.acquire()
        task = asyncio.create_task(lock.acquire())
        asyncio.get_running_loop().call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not client._waits
        await lock.release()

    _arun(redis_server, body)


def test_asyncio_cancel_race(redis_server):
    """A holds, B and C wait; B is cancelled as A releases: C gets the lock."""

    async def body(client):
        lock = _amake(client, "lock")

        async def lockit(blocker):
            await lock.acquire()
            try:
                if blocker is not None:
                    await blocker
            finally:
                await lock.release()

        fa = asyncio.get_running_loop().create_future()
        ta = asyncio.create_task(lockit(fa))
        await _until(lambda: lock.state == redmutex.LockState.HELD, "A to hold")
        tb = asyncio.create_task(lockit(None))
        await _until(lambda: len(client._waits) == 1, "B to wait")
        tc = asyncio.create_task(lockit(None))
        await _until(lambda: len(client._waits) == 2, "C to wait")
        fa.set_result(None)
        tb.cancel()
        await asyncio.wait_for(tc, 10)
        assert ta.done() and tb.cancelled()
        assert not await lock.locked()

    _arun(redis_server, body)


def test_asyncio_cancel_release_race(redis_server):
    """One waiter cancelled as the lock is released: exactly one other takes it."""

    async def body(client):
        lock = _amake(client, "lock")
        taken = 0

        async def lockit():
            nonlocal taken
            await lock.acquire()
            taken += 1

        await lock.acquire()
        tasks = []
        for n in range(3):
            tasks.append(asyncio.create_task(lockit()))
            await _until(lambda n=n: len(client._waits) == n + 1, "the tasks to wait")
        t1, t2, t3 = tasks
        t1.cancel()
        await lock.release()
        with pytest.raises(asyncio.CancelledError):
            await t1
        await asyncio.wait_for(t2, 10)
        assert taken == 1 and not t3.done()
        t3.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t3
        await lock.release()  # t2's (the lock object's) hold

    _arun(redis_server, body)


def test_asyncio_finished_waiter_cancelled(redis_server):
    """A waiter woken and then cancelled passes the lock on to the next."""

    async def body(client):
        lock = _amake(client, "lock")
        await lock.acquire()
        tb = asyncio.create_task(lock.acquire())
        await _until(lambda: len(client._waits) == 1, "B to wait")
        tc = asyncio.create_task(lock.acquire())
        await _until(lambda: len(client._waits) == 2, "C to wait")
        tb.cancel()
        await lock.release()
        assert await asyncio.wait_for(tc, 10)
        assert tb.cancelled() and await lock.locked()
        await lock.release()

    _arun(redis_server, body)


@pytest.mark.parametrize("kind", ["lock", "rlock", "fair_lock", "read", "write"])
def test_asyncio_release_not_acquired_is_a_runtime_error(redis_server, kind):
    async def body(client):
        with pytest.raises(RuntimeError):
            await _amake(client, kind).release()

    _arun(redis_server, body)


@pytest.mark.parametrize("kind", ["lock", "rlock", "fair_lock", "read", "write"])
def test_asyncio_release_no_waiters_and_context_manager(redis_server, kind):
    async def body(client):
        lock = _amake(client, kind)
        await lock.acquire()
        assert await lock.locked()
        await lock.release()
        assert not await lock.locked()
        async with lock:
            assert await lock.locked()
        assert not await lock.locked()

    _arun(redis_server, body)
