"""Ctrl-C (and any signal whose handler raises) interrupts a blocked acquire."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import redmutex

from rmtest_util import channel, wait_until

WAITER = textwrap.dedent(
    """
    import signal, sys, time, redmutex
    # A shell's background job starts with SIGINT ignored; Python then keeps it so.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    client = redmutex.Client(sys.argv[1])
    lock = getattr(client, sys.argv[2])(sys.argv[3])
    print(client.thread_owner(), flush=True)
    try:
        lock.acquire()
    except KeyboardInterrupt:
        # CLOCK_MONOTONIC is one clock for every process: the test compares.
        print("KeyboardInterrupt at %.6f, state %s" % (time.monotonic(), lock.state.name), flush=True)
        sys.exit(42)
    print("acquired", flush=True)
    """
)


@pytest.mark.parametrize("kind", ["lock", "rlock"])
def test_sigint_interrupts_a_blocked_acquire_in_a_subprocess(client, redis_server, r, tmp_path, kind):
    name = "ctrl-c-" + kind
    holder = getattr(client, kind)(name)
    holder.acquire()
    before = r.dump(name)
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    p = subprocess.Popen(
        [sys.executable, str(script), redis_server.url, kind, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        child_owner = p.stdout.readline().strip()
        assert child_owner, p.stderr.read()
        # The child is waiting once it has subscribed to the release channel
        # (a signal during the subscription would end the wait as well).
        wait_until(
            lambda: r.pubsub_numsub(channel(name))[0][1] >= 1,
            timeout=10,
            what="the child to wait on the lock",
        )
        time.sleep(0.1)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 42, (out, err)
    assert "KeyboardInterrupt" in out and "state UNLOCKED" in out
    # Promptly: the C wait was abandoned, not left to run out a backoff
    # (measured to the moment the child caught it, not to its exit).
    elapsed = float(re.search(r"KeyboardInterrupt at ([0-9.]+)", out).group(1)) - sent
    assert 0 <= elapsed < 1.0, elapsed
    # The child left nothing of its own: the key is exactly the holder's.
    assert r.dump(name) == before
    if kind == "rlock":
        assert r.hkeys(name) == [client.thread_owner().encode()]
        assert child_owner.encode() not in r.hkeys(name)
    assert holder.owned()
    holder.release()


class Interrupted(Exception):
    pass


@pytest.fixture
def usr1_handler():
    calls = []

    def handler(signum, frame):
        calls.append(signum)
        if handler.raise_it:
            raise Interrupted(f"signal {signum}")

    handler.raise_it = True
    old = signal.signal(signal.SIGUSR1, handler)
    yield handler, calls
    signal.signal(signal.SIGUSR1, old)


def test_signal_handler_exception_ends_the_wait_in_this_thread(client, make_client, r, usr1_handler):
    _handler, calls = usr1_handler
    holder = client.lock("sig")
    holder.acquire()
    waiter = make_client().lock("sig")
    main = threading.get_ident()

    def poke():
        wait_until(lambda: r.pubsub_numsub(channel("sig"))[0][1] >= 1, timeout=10)
        time.sleep(0.1)
        signal.pthread_kill(main, signal.SIGUSR1)

    t = threading.Thread(target=poke)
    t.start()
    start = time.monotonic()
    with pytest.raises(Interrupted):
        waiter.acquire(timeout=30)
    assert time.monotonic() - start < 5
    t.join()
    assert calls == [signal.SIGUSR1]
    assert waiter.state is redmutex.LockState.UNLOCKED and not waiter.owned()
    assert holder.owned()
    holder.release()
    # The next wait of this thread is not affected by the earlier interruption.
    assert waiter.acquire(timeout=5)
    waiter.release()


def test_signal_handler_that_returns_lets_the_wait_go_on(client, make_client, r, usr1_handler):
    handler, calls = usr1_handler
    handler.raise_it = False
    holder = client.lock("sig2")
    holder.acquire()
    waiter = make_client().lock("sig2")
    main = threading.get_ident()

    def poke_then_release():
        wait_until(lambda: r.pubsub_numsub(channel("sig2"))[0][1] >= 1, timeout=10)
        time.sleep(0.1)
        signal.pthread_kill(main, signal.SIGUSR1)
        wait_until(lambda: calls, timeout=5)
        holder.release()

    t = threading.Thread(target=poke_then_release)
    t.start()
    assert waiter.acquire(timeout=30)
    t.join()
    assert calls == [signal.SIGUSR1]
    waiter.release()


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_sigint_delivered_to_another_thread_ends_the_main_threads_wait(client, make_client, r, sigint_raises):
    # The waiting client's backoff cap is 30 s: only the signal path can end
    # the wait within a second. The signal goes to a helper thread, so the
    # main thread's poll() is never interrupted by it.
    holder = client.lock("other-thread-sig")
    holder.acquire()
    waiter = make_client(wait_backoff_cap=30.0).lock("other-thread-sig")
    sent = []

    def poke():
        wait_until(lambda: r.pubsub_numsub(channel("other-thread-sig"))[0][1] >= 1, timeout=10)
        time.sleep(0.3)
        sent.append(time.monotonic())
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    t = threading.Thread(target=poke)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire(timeout=60)
    ended = time.monotonic()
    t.join()
    assert ended - sent[0] < 0.5, ended - sent[0]
    assert waiter.state is redmutex.LockState.UNLOCKED and not waiter.owned()
    assert holder.owned()
    holder.release()


def test_ctrl_c_in_the_main_thread_leaves_other_threads_waits_alone(client, make_client, r, sigint_raises):
    holder = client.lock("worker-wait")
    holder.acquire()
    c = make_client(wait_backoff_cap=30.0)
    result = {}

    def worker():
        try:
            result["acquired"] = c.lock("worker-wait").acquire(timeout=30)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            result["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    wait_until(lambda: r.pubsub_numsub(channel("worker-wait"))[0][1] >= 1, timeout=10)
    main_waiter = c.lock("main-wait")
    c.lock("main-wait").acquire()  # held by another lock object: the main thread will wait
    threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        main_waiter.acquire(timeout=30)
    time.sleep(0.2)
    assert t.is_alive() and not result  # the worker still waits, undisturbed
    holder.release()
    t.join(10)
    assert result == {"acquired": True}, result


def _make(client, kind, name):
    if kind in ("read", "write"):
        return getattr(client.rwlock(name), kind)
    return getattr(client, kind)(name)


@pytest.mark.parametrize("kind", ["lock", "rlock", "fair_lock", "read", "write"])
def test_ctrl_c_as_the_acquire_wins_leaves_nothing_held(client, r, sigint_raises, kind):
    """Ctrl-C while the acquisition's round trip is in flight (the server holds
    it back with CLIENT PAUSE): the round trip then wins, and the interrupt is
    raised as acquire() returns. Whatever raises it - acquire() or the entry
    of ``with`` - the lock is given back before it propagates: no hold is left
    that no Python code can release, renewed by the watchdog for ever."""
    name = "ctrl-c-wins-" + kind
    lock = _make(client, kind, name)
    main = threading.get_ident()
    for form in ("acquire", "with"):
        assert lock.acquire(blocking=False)  # connections and scripts ready
        lock.release()

        def interrupt_in_flight():
            wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, timeout=10, what="the attempt")
            signal.pthread_kill(main, signal.SIGINT)
            r.execute_command("CLIENT", "UNPAUSE")

        r.execute_command("CLIENT", "PAUSE", 20000, "WRITE")
        t = threading.Thread(target=interrupt_in_flight)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                if form == "acquire":
                    lock.acquire(timeout=30)
                    time.sleep(5)  # (never reached: the interrupt comes first)
                else:
                    with lock:
                        time.sleep(5)
        finally:
            r.execute_command("CLIENT", "UNPAUSE")
            t.join()
        assert lock.state is redmutex.LockState.UNLOCKED, form
        assert not r.exists(name), form  # given back, not held by nobody
        assert lock.acquire(blocking=False)  # free for anyone
        lock.release()
