"""redmutex.asyncio against a real redis-server: waiting without a thread per
waiter, per-task ownership, cancellation, Ctrl-C, lost locks on the loop,
interop with redis-py's asyncio Lock and with the blocking API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redis
import redis.asyncio
import redmutex
from redmutex.asyncio import AsyncClient

from conftest import RedisServer
from rmtest_util import channel, wait_until


def threads_now() -> int:
    """The OS threads of this process (C threads included)."""
    return len(os.listdir("/proc/self/task"))


def lock_keys(r: redis.Redis) -> list[bytes]:
    """Keys left on the server, but for unlock latches (Redisson's idempotent-release
    markers, deleted by a later command of the client or expiring on their own)."""
    return sorted(k for k in r.keys("*") if not k.startswith(b"redisson_unlock_latch:"))


def fds_now() -> int:
    return len(os.listdir("/proc/self/fd"))


async def until(predicate, timeout: float = 10.0, what: str = "condition"):
    """Awaits a condition with a deadline (the loop keeps running meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


class Critical:
    """A shared counter whose update spans an await: overlapping holders lose increments."""

    def __init__(self) -> None:
        self.count = 0
        self.inside = 0
        self.overlaps = 0

    async def enter(self) -> None:
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        value = self.count
        await asyncio.sleep(0)
        self.count = value + 1
        self.inside -= 1


# ---- many waiters, few threads ------------------------------------------------


def test_1000_tasks_wait_on_one_lock_with_a_handful_of_threads(redis_url, r):
    async def main():
        before_threads, before_fds = threads_now(), fds_now()
        async with AsyncClient(redis_url) as client:
            holder = client.lock("many")
            await holder.acquire()
            shared = Critical()

            async def task():
                async with client.lock("many"):
                    await shared.enter()

            tasks = [asyncio.create_task(task()) for _ in range(1000)]
            await until(lambda: len(client._waits) == 1000, what="1000 waiting tasks")
            waiting_threads = threads_now() - before_threads
            waiting_fds = fds_now() - before_fds
            await holder.release()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            assert shared.count == 1000 and shared.overlaps == 0
            assert not client._waits and not client._pending
        return waiting_threads, waiting_fds

    threads, fds = asyncio.run(main())
    # The pool (4), the core's subscriber and watchdog, and the package's log
    # thread when this is the process's first client: no thread per waiter.
    assert threads <= 7, threads
    # The client's own descriptors (wait, event, pool fds, sockets): none per waiter.
    assert fds <= 16, fds
    assert lock_keys(r) == []


def test_cancelling_half_of_1000_waiters_leaves_the_rest_served_and_no_key(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            holder = client.rlock("half")
            await holder.acquire()
            shared = Critical()

            async def task():
                async with client.rlock("half"):
                    await shared.enter()

            tasks = [asyncio.create_task(task()) for _ in range(1000)]
            await until(lambda: len(client._waits) == 1000, what="1000 waiting tasks")
            cancelled = tasks[::2]
            for t in cancelled:
                t.cancel()
            start = time.monotonic()
            await asyncio.wait(cancelled)
            cancel_time = time.monotonic() - start
            assert all(t.cancelled() for t in cancelled)
            await until(lambda: len(client._waits) == 500, what="the cancelled waits to go")
            await holder.release()
            await asyncio.wait_for(asyncio.gather(*tasks[1::2]), 60)
            assert shared.count == 500 and shared.overlaps == 0
            await until(lambda: not client._pending, what="clean-ups to finish")
        return cancel_time

    cancel_time = asyncio.run(main())
    assert cancel_time < 2.0, cancel_time  # at once: no round trip per cancelled waiter on the loop
    assert lock_keys(r) == []


# ---- ownership ---------------------------------------------------------------------


def test_reentrancy_is_per_task_and_two_tasks_on_one_thread_exclude_each_other(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            lock = client.rlock("per-task")
            a_holds = asyncio.Event()
            a_may_release = asyncio.Event()
            order = []

            async def a():
                async with lock:
                    async with lock:  # the same task re-enters
                        assert await lock.hold_count() == 2
                        order.append("a in")
                        a_holds.set()
                        await a_may_release.wait()
                    order.append("a out once")
                order.append("a out")

            async def b():
                await a_holds.wait()
                assert not await lock.acquire(timeout=0.3)  # another task: excluded
                assert await lock.hold_count() == 0
                a_may_release.set()
                async with lock:
                    order.append("b in")
                    assert await lock.hold_count() == 1

            await asyncio.gather(a(), b())
            assert order == ["a in", "a out once", "a out", "b in"]
            owners = {client.task_owner()}
            assert len(owners) == 1 and owners.pop().startswith(client.id + ":task-")

    asyncio.run(main())
    assert lock_keys(r) == []


def test_plain_lock_is_owned_by_the_lock_object_and_explicit_owners_work(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            lock = client.lock("plain")
            await lock.acquire()
            # Like asyncio.Lock: any task may release it.
            await asyncio.create_task(lock.release())
            assert not await lock.locked()
            mine = client.rlock("explicit", owner="job-7")
            await mine.acquire()
            assert r.hkeys("explicit") == [b"job-7"]
            assert await client.rlock("explicit", owner="job-7").hold_count() == 1
            assert not await client.rlock("explicit", owner="job-8").acquire(blocking=False)
            await mine.release()

    asyncio.run(main())
    assert lock_keys(r) == []


# ---- cancellation -----------------------------------------------------------------


def test_cancel_inside_async_with_releases(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            inside = asyncio.Event()

            async def holder():
                async with client.lock("cancel-inside"):
                    inside.set()
                    await asyncio.sleep(3600)

            t = asyncio.create_task(holder())
            await inside.wait()
            assert r.exists("cancel-inside")
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert not r.exists("cancel-inside")

    asyncio.run(main())


def test_cancel_during_an_attempt_in_flight_ends_at_once_and_releases_what_it_won(redis_url, r):
    """CLIENT PAUSE holds the attempt's SET on the server: the task is cancelled
    while its acquisition is in flight; the acquisition, when it lands, is
    released by the worker for nobody, and the loop never blocked meanwhile."""

    async def main():
        async with AsyncClient(redis_url) as client:
            lock = client.lock("in-flight")
            await lock.acquire()  # connections and scripts ready
            await lock.release()
            r.execute_command("CLIENT", "PAUSE", 10000, "WRITE")  # lifted below
            t = asyncio.create_task(lock.acquire())
            # The loop runs while the attempt waits on the server.
            ticks = 0
            for _ in range(20):
                await asyncio.sleep(0.01)
                ticks += 1
            assert not t.done()
            start = time.monotonic()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            ended = time.monotonic() - start
            r.execute_command("CLIENT", "UNPAUSE")
            # After the pause the SET lands and the worker releases it.
            await until(lambda: not client._pending, what="the abandoned attempt to end")
            assert r.get("in-flight") is None
            assert lock.state == redmutex.LockState.UNLOCKED
            assert await lock.acquire(blocking=False)  # free for anyone
            await lock.release()
            return ticks, ended

    ticks, ended = asyncio.run(main())
    assert ticks == 20
    assert ended < 1.0, ended  # at once, not after the 10 s paused round trip
    assert lock_keys(r) == []


def test_timeouts_and_non_blocking(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            holder = client.lock("busy")
            await holder.acquire()
            other = client.lock("busy", timeout=0.2)
            assert not await other.acquire(blocking=False)
            start = time.monotonic()
            assert not await other.acquire(timeout=0.3)
            assert 0.25 <= time.monotonic() - start < 2.0
            with pytest.raises(redmutex.LockTimeout, match="busy"):
                async with other:
                    pass
            with pytest.raises(redmutex.InvalidArgument):
                await other.acquire(blocking=False, timeout=1)
            with pytest.raises(redmutex.InvalidArgument):
                await other.acquire(timeout=-3)
            await holder.release()
            assert not client._waits

    asyncio.run(main())
    assert lock_keys(r) == []


# ---- lost locks ---------------------------------------------------------------------


def test_lost_lock_runs_on_lost_on_the_loop_and_async_with_raises_at_exit(redis_url, r):
    async def main():
        async with AsyncClient(redis_url, watchdog_lease=0.3) as client:
            seen = []
            loop_thread = threading.get_ident()

            async def on_lost(lock, state):
                seen.append((state, threading.get_ident()))

            lock = client.lock("lost", on_lost=on_lost)
            with pytest.raises(redmutex.LockLostError):
                async with lock:
                    r.delete("lost")  # behind the holder's back
                    await until(lambda: seen, what="on_lost")
            assert seen[0] == (redmutex.LockState.LOST, loop_thread)
            assert lock.state == redmutex.LockState.UNLOCKED

    asyncio.run(main())


def test_on_lost_exception_is_raised_by_the_next_call(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:

            def on_lost(lock, state):
                raise ValueError("callback failed")

            lock = client.lock("lost-exc", lease=0.2, on_lost=on_lost)
            await lock.acquire()
            await until(lambda: lock._pending, what="the lease to run out")
            with pytest.raises(ValueError, match="callback failed"):
                await lock.release()

    asyncio.run(main())


# ---- interop --------------------------------------------------------------------------


def test_interop_with_redis_py_asyncio_lock(redis_url, redis_server, r):
    async def main():
        peer = redis.asyncio.Redis(port=redis_server.port)
        async with AsyncClient(redis_url, wait_backoff_cap=0.2) as client:
            theirs = peer.lock("shared", timeout=30)
            ours = client.lock("shared")
            assert await theirs.acquire()
            assert not await ours.acquire(timeout=0.2)
            waiter = asyncio.create_task(ours.acquire())
            await asyncio.sleep(0.1)
            await theirs.release()  # publishes nothing: the backoff cap bounds the wait
            assert await asyncio.wait_for(waiter, 3)
            assert not await theirs.acquire(blocking_timeout=0.2)
            await ours.release()
            assert await theirs.acquire(blocking_timeout=1)
            await theirs.release()

            # Both kinds of contender on one counter.
            shared = Critical()

            async def ours_task():
                async with client.lock("mixed"):
                    await shared.enter()

            async def theirs_task():
                lock = peer.lock("mixed", timeout=30, sleep=0.005)
                async with lock:
                    await shared.enter()

            await asyncio.wait_for(
                asyncio.gather(*[ours_task() for _ in range(50)], *[theirs_task() for _ in range(50)]), 60
            )
            assert shared.count == 100 and shared.overlaps == 0
        await peer.aclose()

    asyncio.run(main())
    assert lock_keys(r) == []


def test_sync_and_async_apis_of_one_process_exclude_each_other(redis_url, r):
    sync_client = redmutex.Client(redis_url)
    count = {"n": 0, "inside": 0, "overlaps": 0}
    mu = threading.Lock()

    def critical_sync():
        with mu:
            count["inside"] += 1
            count["overlaps"] += count["inside"] > 1
            value = count["n"]
        time.sleep(0.001)
        with mu:
            count["n"] = value + 1
            count["inside"] -= 1

    def sync_worker():
        for _ in range(25):
            with sync_client.lock("both"):
                critical_sync()

    async def main():
        async with AsyncClient(redis_url) as client:
            threads = [threading.Thread(target=sync_worker) for _ in range(2)]
            for t in threads:
                t.start()

            async def task():
                for _ in range(10):
                    async with client.lock("both"):
                        await asyncio.to_thread(critical_sync)

            await asyncio.wait_for(asyncio.gather(*[task() for _ in range(5)]), 60)
            for t in threads:
                await asyncio.to_thread(t.join)

    try:
        asyncio.run(main())
    finally:
        sync_client.close()
    assert count["n"] == 100 and count["overlaps"] == 0
    assert lock_keys(r) == []


# ---- Ctrl-C ---------------------------------------------------------------------------

CTRL_C = textwrap.dedent(
    """
    import asyncio, signal, sys, time
    from redmutex.asyncio import AsyncClient

    # This test interrupts this process: it sets SIGINT's disposition itself.
    # A process started with SIGINT ignored (a shell's background job, nohup,
    # a CI runner) passes that on, Python keeps an inherited SIG_IGN, and
    # asyncio.run() then installs no handler: the signal would do nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def make(client, kind, name):
        if kind in ("read", "write"):
            return getattr(client.rwlock(name), kind)
        return getattr(client, kind)(name)

    async def main(url, mode, kind):
        async with AsyncClient(url) as client:
            lock = make(client, kind, "ctrl-c")
            if mode == "holding":
                await lock.acquire()
                print("holding", flush=True)
                await asyncio.sleep(3600)
            print("waiting", flush=True)
            await lock.acquire()

    start = time.monotonic()
    try:
        asyncio.run(main(*sys.argv[1:4]))
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(42)
    """
)


@pytest.mark.parametrize("kind", ["lock", "rlock", "fair_lock", "write"])
@pytest.mark.parametrize("mode", ["waiting", "holding"])
def test_ctrl_c_ends_a_waiting_or_holding_task_and_leaves_nothing(redis_url, r, tmp_path, mode, kind):
    holder = redmutex.Client(redis_url)
    lock = make_lock(holder, kind, "ctrl-c")
    if mode == "waiting":
        lock.acquire()
        before = r.dump("ctrl-c")
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    p = subprocess.Popen(
        [sys.executable, str(script), redis_url, mode, kind],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == mode, p.stderr.read()
        if mode == "waiting":
            # Subscribed to its release channel (a fair waiter: its own).
            wait_until(lambda: r.pubsub_channels("*ctrl-c*"), timeout=10, what="the child to wait")
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        try:
            if mode == "waiting":
                assert r.dump("ctrl-c") == before  # the holder's key, untouched
                lock.release()
        finally:
            holder.close()
    assert p.returncode == 42, (out, err)
    assert "KeyboardInterrupt" in out
    assert elapsed < 3.0, elapsed
    assert lock_keys(r) == []


# ---- the client -------------------------------------------------------------------------


def test_queries_extend_and_synchronized(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            lock = client.lock("q", lease=5.0, fencing=True)
            assert not await lock.locked() and await lock.ttl() is None
            await lock.acquire()
            assert await lock.locked() and await lock.owned()
            assert 4.0 < await lock.ttl() <= 5.0
            assert lock.fence is not None and lock.validity > 4.0
            await lock.extend(10.0, replace=True)
            assert 9.0 < await lock.ttl() <= 10.0
            assert await lock.hold_count() == 1
            await lock.release()
            with pytest.raises(redmutex.NotOwnedError):
                await lock.release()
            with pytest.raises(redmutex.NotOwnedError):
                await lock.extend(1.0)
            await client.lock("q").acquire()
            assert await client.lock("q").force_release()

            shared = Critical()

            @client.synchronized("deco")
            async def work():
                await shared.enter()

            @client.synchronized("deco-r", reentrant=True)
            async def recurse(n):
                if n:
                    return await recurse(n - 1)
                return await client.rlock("deco-r").hold_count()  # at the innermost call

            await asyncio.gather(*[work() for _ in range(30)])
            assert shared.count == 30 and shared.overlaps == 0
            assert await recurse(3) == 4
            with pytest.raises(TypeError):
                client.synchronized("x")(lambda: None)
            with pytest.raises(redmutex.InvalidArgument):
                client.synchronized("x", lease=-1)

    asyncio.run(main())
    assert lock_keys(r) == [b"redisson_lock_token:{q}"]  # the fencing counter stays


def test_close_ends_waits_and_stops_the_workers(redis_url, r):
    async def main():
        base = threads_now()
        client = AsyncClient(redis_url, pool_threads=2)
        holder = client.lock("closing")
        await holder.acquire()
        waiter = asyncio.create_task(client.lock("closing").acquire())
        await until(lambda: client._waits, what="a waiting task")
        await client.close()
        with pytest.raises(redmutex.ClosedError):
            await waiter
        assert not r.exists("closing")  # close released the held lock
        with pytest.raises(redmutex.ClosedError):
            client.lock("x")
        with pytest.raises(redmutex.ClosedError):
            await holder.acquire()
        await client.close()  # idempotent
        await until(lambda: threads_now() <= base, what="the workers to exit")

    asyncio.run(main())


def test_a_closed_client_refuses_local_queries_as_the_blocking_api_does(redis_url, r):
    """The blocking API's rule, the same in asyncio: every call on a closed
    client raises ClosedError, also those that need no I/O (the C core would
    still answer them), also a fence of a lock without fencing."""

    async def main():
        client = AsyncClient(redis_url)
        plain, fenced, reentrant = client.lock("q"), client.lock("q2", fencing=True), client.rlock("q3")
        await fenced.acquire()
        await client.close()
        for lock in (plain, fenced, reentrant):
            for prop in ("state", "lost", "validity", "fence"):
                with pytest.raises(redmutex.ClosedError):
                    getattr(lock, prop)
        with pytest.raises(redmutex.ClosedError):
            client.task_owner()
        assert "unlocked" in repr(fenced)

    asyncio.run(main())
    with redmutex.Client(redis_url) as client:
        lock = client.lock("q")
    for prop in ("state", "lost", "validity", "fence"):
        with pytest.raises(redmutex.ClosedError):
            getattr(lock, prop)
    with pytest.raises(redmutex.ClosedError):
        client.thread_owner()
    assert "state=CLOSED" in repr(lock)


def test_bad_input_and_a_second_loop(redis_url, r):
    with pytest.raises(redmutex.InvalidArgument):
        AsyncClient(redis_url, pool_threads=0)
    with pytest.raises(redmutex.InvalidArgument):
        AsyncClient(redis_url, pool_threads=True)
    with pytest.raises(redmutex.InvalidArgument):
        AsyncClient("http://nope")
    with pytest.raises(TypeError):
        AsyncClient(redis_url, no_such_option=1)
    client = AsyncClient(redis_url)
    with pytest.raises(redmutex.InvalidArgument):
        client.lock("")
    with pytest.raises(redmutex.InvalidArgument):
        client.rlock("x", owner="o" * 300)
    with pytest.raises(redmutex.InvalidArgument):
        client.lock("x", on_lost=3)

    async def use():
        lock = client.rlock("loop")
        await lock.acquire()
        await lock.release()

    asyncio.run(use())  # binds the client to this loop, which then closes
    asyncio.run(use())  # a closed loop's client moves on to the next one

    async def other_loop_while_running():
        thread_result = []

        def in_thread():
            try:
                asyncio.run(use())
            except RuntimeError as e:
                thread_result.append(e)

        await use()
        t = threading.Thread(target=in_thread)
        t.start()
        await asyncio.to_thread(t.join)
        return thread_result

    errors = asyncio.run(other_loop_while_running())
    assert errors and "another event loop" in str(errors[0])

    async def close():
        await client.close()

    asyncio.run(close())
    assert lock_keys(r) == []


def test_redlock_over_three_servers(tmp_path):
    servers = []
    try:
        for i in range(3):
            s = RedisServer(str(tmp_path / f"r{i}"))
            os.mkdir(s.workdir)
            s.start()
            servers.append(s)
        conns = [redis.Redis(port=s.port) for s in servers]

        async def main():
            # With several URLs the constructor connects to each: create() keeps that off the loop.
            async with await AsyncClient.create([s.url for s in servers], wait_backoff_cap=0.2) as client:
                assert client.server_count == 3
                shared = Critical()

                async def task():
                    async with client.lock("quorum", fencing=True) as lock:
                        assert lock.fence is not None
                        assert sum(r.exists("quorum") for r in conns) >= 2  # decided at a majority
                        await shared.enter()

                await asyncio.wait_for(asyncio.gather(*[task() for _ in range(100)]), 60)
                assert shared.count == 100 and shared.overlaps == 0
                # A majority is enough; a minority is not.
                conns[0].set("split", "someone-else")
                async with client.lock("split", timeout=1.0):
                    assert conns[1].exists("split") and conns[2].exists("split")
                conns[1].set("split", "someone-else")
                assert not await client.lock("split").acquire(timeout=0.3)
                assert not conns[2].exists("split")

        asyncio.run(main())
        assert all(r.exists("quorum") == 0 for r in conns)
    finally:
        for s in servers:
            s.stop()


def test_a_client_made_before_fork_is_refused_in_the_child(redis_url, r):
    client = AsyncClient(redis_url)

    async def use():
        await client.lock("forked").acquire(blocking=False)

    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        try:
            asyncio.run(use())
            code = 1
        except RuntimeError as e:
            code = 42 if "after fork()" in str(e) else 2
        except BaseException:  # noqa: BLE001 - any other outcome fails the test
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 42
    assert not r.exists("forked")

    async def close():
        await client.close()

    asyncio.run(close())


# ---- fair and read-write locks -------------------------------------------------


def test_fair_lock_serves_tasks_and_threads_in_arrival_order(redis_url, r):
    queue = "redisson_lock_queue:{afair}"

    async def main():
        async with AsyncClient(redis_url) as client:
            holder = client.fair_lock("afair", owner="holder")
            await holder.acquire()
            served: list[str] = []

            async def task_waiter(label: str) -> None:
                async with client.fair_lock("afair"):  # owned by this task
                    served.append(label)

            def thread_waiter(label: str) -> None:
                with redmutex.Client(redis_url) as blocking, blocking.fair_lock("afair"):
                    served.append(label)

            tasks, threads = [], []
            for k, label in enumerate(["task0", "thread1", "task2", "thread3"]):
                if label.startswith("task"):
                    tasks.append(asyncio.create_task(task_waiter(label)))
                else:
                    threads.append(threading.Thread(target=thread_waiter, args=(label,)))
                    threads[-1].start()
                await until(lambda n=k + 1: r.llen(queue) == n, what=f"{label} to queue")
            await holder.release()
            await asyncio.gather(*tasks)
            for t in threads:
                await asyncio.to_thread(t.join, 15)
            assert served == ["task0", "thread1", "task2", "thread3"]

            # A waiting task that is cancelled leaves the queue.
            await holder.acquire()
            waiting = asyncio.create_task(client.fair_lock("afair").acquire())
            await until(lambda: r.llen(queue) == 1, what="the task to queue")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await until(lambda: r.llen(queue) == 0, what="the cancelled task to leave the queue")
            await holder.release()

    asyncio.run(main())
    assert lock_keys(r) == []


def test_rwlock_tasks_read_together_and_a_writer_waits(redis_url, r):
    async def main():
        async with AsyncClient(redis_url) as client:
            rw = client.rwlock("acatalog")
            inside = most = 0
            go = asyncio.Event()

            async def reader() -> None:
                nonlocal inside, most
                async with rw.read:  # each task is a reader of its own
                    inside += 1
                    most = max(most, inside)
                    await go.wait()
                    inside -= 1

            async def writer() -> bytes | None:
                async with rw.write:
                    return r.hget("acatalog", "mode")

            readers = [asyncio.create_task(reader()) for _ in range(2)]
            await until(lambda: most == 2, what="two readers inside at once")
            assert r.hget("acatalog", "mode") == b"read"
            assert not await rw.write.acquire(blocking=False)
            waiting = asyncio.create_task(writer())
            await until(
                lambda: r.pubsub_numsub("redisson_rwlock:{acatalog}")[0][1] >= 1, what="the writer to wait"
            )
            assert not waiting.done()  # readers are in
            go.set()
            await asyncio.gather(*readers)
            assert await waiting == b"write"

    asyncio.run(main())
    assert lock_keys(r) == []


# ---- cancellation at a hand-off, task owners, closed loops --------------------------

REENTRANT_KINDS = ["rlock", "fair_lock", "read", "write"]


def make_lock(client, kind, name, **kwargs):
    """A lock of the kind named as in the parametrizations: a lock method, or a side of an rwlock."""
    if kind in ("read", "write"):
        return getattr(client.rwlock(name, **kwargs), kind)
    return getattr(client, kind)(name, **kwargs)


def held_by(r: redis.Redis, kind: str, name: str, owner: str) -> bool:
    """Whether the server shows owner's hold (or a hand-off to it) on the lock."""
    if kind == "lock":
        return r.get(name) == owner.encode()
    return r.hexists(name, owner + ":write" if kind == "write" else owner)


def waiting_on(r: redis.Redis, kind: str, name: str, owner: str) -> bool:
    """Whether a waiter of the lock has subscribed (or, fair, queued)."""
    if kind == "fair_lock":
        return r.llen(f"redisson_lock_queue:{{{name}}}") >= 1
    chan = f"redisson_rwlock:{{{name}}}" if kind in ("read", "write") else channel(name)
    return r.pubsub_numsub(chan)[0][1] >= 1


@pytest.mark.parametrize("kind", REENTRANT_KINDS)
def test_wait_for_acquire_is_owned_by_the_task_that_awaits_it(redis_url, r, kind):
    """asyncio.wait_for (3.11) and shield run the acquire in a task of their own:
    the hold is the awaiting task's all the same, which releases it."""

    async def main():
        async with AsyncClient(redis_url) as client:
            lock = make_lock(client, kind, "wf")
            assert await asyncio.wait_for(lock.acquire(), 5)
            assert await lock.hold_count() == 1
            await lock.release()
            assert await asyncio.shield(lock.acquire())
            async with lock:  # re-enters: the same owner
                assert await lock.hold_count() == 2
            await asyncio.wait_for(lock.release(), 5)
            assert not r.exists("wf")
            # A wait_for that runs out leaves nothing, and the next one is the task's.
            holder = make_lock(client, "write" if kind == "read" else kind, "wf", owner="holder")
            await holder.acquire()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lock.acquire(), 0.3)
            await holder.release()
            assert await asyncio.wait_for(lock.acquire(), 5)
            await lock.release()
            assert not client._waits

    asyncio.run(main())
    assert lock_keys(r) == []


@pytest.mark.parametrize("kind", ["lock", *REENTRANT_KINDS])
def test_cancel_at_a_hand_off_then_retry_holds_once_and_raises_nothing(redis_url, r, kind):
    """A waiting task of owner "me" is cancelled around the moment the holder's
    release hands it the lock (a releasing script, a releasing task of the same
    client, or a release message), sometimes while its attempt is in flight,
    and the owner retries at once. The retry holds exactly one level and never
    raises (no NotOwnedError, no LockLostError), and its release leaves nothing:
    no level that nobody holds."""
    name = "handoff-" + kind

    async def main():
        failures = []
        async with AsyncClient(redis_url) as client, AsyncClient(redis_url) as other:
            for i in range(40):
                holder_kind = "write" if kind == "read" else kind  # readers would share it
                holder = make_lock(other if i % 2 else client, holder_kind, name, owner="holder")
                await holder.acquire()
                lock = make_lock(client, kind, name, owner="me")
                t = asyncio.create_task(lock.acquire())
                await until(lambda: waiting_on(r, kind, name, "me"), what="the task to wait")
                await holder.release()
                if i % 4 == 1:
                    await until(lambda t=t: held_by(r, kind, name, "me") or t.done(), what="the hand-off")
                elif i % 4 == 2:
                    await asyncio.sleep(0)
                elif i % 4 == 3:
                    await asyncio.sleep(0.001 * (i % 7))
                t.cancel()
                try:
                    await t
                    await lock.release()  # it won before the cancel came
                except asyncio.CancelledError:
                    pass
                try:
                    assert await lock.acquire(timeout=10), "the retry timed out"
                    count = await lock.hold_count()
                    await lock.release()
                    if count != 1:
                        failures.append((i, f"the retry holds {count} levels"))
                except Exception as e:  # noqa: BLE001 - collected and reported below
                    failures.append((i, repr(e)))
                await until(lambda: not client._pending, what="clean-ups to finish")
                if r.exists(name):
                    failures.append((i, f"left held by nobody, pttl {r.pttl(name)}"))
                    r.delete(name)
        return failures

    assert asyncio.run(main()) == []
    assert lock_keys(r) == []


def test_closing_the_loop_with_waits_pending_ends_them_quietly(redis_url, r):
    """A loop closed while tasks wait (run_until_complete, then close, without
    cancelling them) can never run those tasks again. The next use of the
    client, on a new loop, ends their waits - a fair waiter leaves the queue,
    an attempt that was in flight when the loop closed gives back what it won
    - and no callback of the client raises "Event loop is closed"."""
    client = AsyncClient(redis_url)
    errors = []
    kinds = ["lock", "rlock", "fair_lock", "write"]

    async def first():
        holders = [make_lock(client, k, "closing-" + k, owner="holder") for k in kinds]
        for h in holders:
            await h.acquire()
        for k in kinds:
            asyncio.get_running_loop().create_task(make_lock(client, k, "closing-" + k).acquire())
        await until(lambda: len(client._waits) == len(kinds), what="the tasks to wait")
        await until(lambda: r.llen("redisson_lock_queue:{closing-fair_lock}") == 1, what="the fair waiter")
        # One more whose attempt is in flight (held on the server) as the loop closes.
        r.execute_command("CLIENT", "PAUSE", 10000, "WRITE")
        asyncio.get_running_loop().create_task(client.lock("closing-in-flight").acquire())
        await until(lambda: r.info("clients")["blocked_clients"] >= 1, what="the attempt to be in flight")
        return holders

    loop = asyncio.new_event_loop()
    try:
        holders = loop.run_until_complete(first())
    finally:
        loop.close()  # the waiting tasks are left pending
        r.execute_command("CLIENT", "UNPAUSE")

    async def second():
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        lock = client.lock("closing-other")
        await lock.acquire()  # the first use on this loop ends the old loop's waits
        await lock.release()
        assert not client._waits
        await until(lambda: not client._pending, what="the clean-ups to finish")
        assert r.llen("redisson_lock_queue:{closing-fair_lock}") == 0
        assert not r.exists("closing-in-flight")  # won after the loop closed: given back
        for h in holders:
            await h.release()
        await client.close()

    asyncio.run(second())
    assert errors == []
    assert lock_keys(r) == []


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
def test_an_interrupt_of_the_client_leaves_waiting_tasks_waiting(redis_url, r, kind):
    # A signal during a blocking acquire on the main thread interrupts the whole
    # C client (redmutex_client_interrupt, _signals.py), and that ends pollable
    # waits too. A waiting task is not the one the signal was for: it goes on
    # waiting for the time it has left (PEP 475), as a blocking acquire does.
    from redmutex._redmutex_cffi import lib

    async def main():
        async with AsyncClient(redis_url) as client:
            holder = getattr(client, kind)("intr", owner="holder")
            await holder.acquire()

            async def waiter() -> bool:
                lock = getattr(client, kind)("intr")  # owned by this task
                if not await lock.acquire(timeout=20):
                    return False
                await lock.release()
                return True

            waiting = asyncio.create_task(waiter())
            await until(lambda: len(client._waits) == 1, what="the task to wait")
            lib.redmutex_client_interrupt(client._ptr)
            await asyncio.sleep(0.3)  # the interrupted try has run by now
            assert not waiting.done(), waiting.exception() if waiting.done() else None
            await holder.release()
            assert await asyncio.wait_for(waiting, 15)
            assert not client._waits

    asyncio.run(main())
    assert lock_keys(r) == []
