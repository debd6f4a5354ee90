"""Bad input raises InvalidArgument before anything is sent to Redis."""

from __future__ import annotations

import math
import threading

import pytest
import redmutex

BAD_NAMES = [
    pytest.param(None, id="None"),
    pytest.param(42, id="int"),
    pytest.param(["x"], id="list"),
    pytest.param(bytearray(b"x"), id="bytearray"),
    pytest.param("", id="empty-str"),
    pytest.param(b"", id="empty-bytes"),
    pytest.param("a\0b", id="nul-str"),
    pytest.param(b"a\0b", id="nul-bytes"),
    pytest.param("x" * 1025, id="too-long"),
    pytest.param("é" * 513, id="too-long-utf8"),
    pytest.param("\udcff", id="lone-surrogate"),
]

BAD_TIMES = [
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(-0.5, id="negative"),
    pytest.param(367 * 24 * 3600.0, id="over-a-year"),
    pytest.param(10**30, id="huge-int"),
    pytest.param(1e308, id="huge-float"),
    pytest.param("1", id="str"),
    pytest.param(True, id="bool"),
]


@pytest.fixture
def commands(r):
    """How many commands the server processed since the fixture started (minus INFO itself)."""

    def count() -> int:
        return int(r.info("stats")["total_commands_processed"])

    start = count()
    return lambda: count() - start - 1


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names(client, commands, name):
    for make in (client.lock, client.rlock):
        with pytest.raises(redmutex.InvalidArgument) as info:
            make(name)
        assert isinstance(info.value, ValueError)
    with pytest.raises(redmutex.InvalidArgument):
        client.synchronized(name)
    assert commands() == 0


def test_longest_name_is_accepted(client, r):
    with client.lock("n" * redmutex.NAME_MAX):
        assert r.exists("n" * redmutex.NAME_MAX)


@pytest.mark.parametrize("owner", [*BAD_NAMES[1:], pytest.param("o" * 257, id="owner-too-long")])
def test_bad_owners(client, commands, owner):
    with pytest.raises(redmutex.InvalidArgument):
        client.rlock("x", owner=owner)
    with pytest.raises(redmutex.InvalidArgument):
        client.lock("x", owner=owner)
    assert commands() == 0


@pytest.mark.parametrize("value", BAD_TIMES)
def test_bad_times(client, commands, value):
    lock = client.lock("t")
    # A wait longer than a year is threading's business: see the next test.
    is_wait_ok = not isinstance(value, (str, bool)) and 366 * 24 * 3600 < value <= threading.TIMEOUT_MAX
    for kwargs in ({"lease": value}, {"timeout": value}, {"max_hold": value}):
        if "timeout" in kwargs and is_wait_ok:
            continue
        with pytest.raises(redmutex.InvalidArgument):
            client.lock("t", **kwargs)
    if not is_wait_ok:
        with pytest.raises(redmutex.InvalidArgument):
            lock.acquire(timeout=value)
    with pytest.raises(redmutex.InvalidArgument):
        lock.extend(value)
    assert commands() == 0


def test_waits_take_threading_timeouts(client, commands):
    """acquire(timeout=) and a lock's timeout= follow threading.Lock.acquire: a
    wait over the C core's year, up to threading.TIMEOUT_MAX, is forever; a
    longer or infinite one raises what threading raises (OverflowError), which is
    also an InvalidArgument, and sends nothing."""
    lock = client.lock("t")
    for value in (threading.TIMEOUT_MAX + 1, 1e100, 10**30, math.inf, -math.inf):
        with pytest.raises(OverflowError) as e:
            lock.acquire(timeout=value)
        assert isinstance(e.value, redmutex.InvalidArgument)
        with pytest.raises(OverflowError):
            client.lock("t", timeout=value)
    with pytest.raises(ValueError):
        lock.acquire(timeout=math.nan)
    assert commands() == 0
    for value in (threading.TIMEOUT_MAX, 367 * 24 * 3600.0):
        assert lock.acquire(timeout=value)
        lock.release()
        with client.lock("t", timeout=value):
            pass


@pytest.mark.parametrize("value", BAD_TIMES)
@pytest.mark.parametrize(
    "option",
    [
        "watchdog_lease",
        "connect_timeout",
        "command_timeout",
        "wait_backoff_cap",
        "replica_timeout",
        "retry_delay",
        "shutdown_timeout",
    ],
)
def test_bad_client_times(redis_url, option, value):
    with pytest.raises(redmutex.InvalidArgument):
        redmutex.Client(redis_url, **{option: value})


def test_zero_lease_and_out_of_range_options(redis_url, client, commands):
    with pytest.raises(redmutex.InvalidArgument, match="lease"):
        client.lock("z", lease=0)  # 0 would mean "watchdog" in C: refused, use None
    with pytest.raises(redmutex.InvalidArgument, match="lease"):
        client.lock("z", lease=0.005)  # below the core's 10 ms minimum
    with pytest.raises(redmutex.InvalidArgument):
        client.lock("z").extend(0)
    for kwargs in ({"max_extensions": -1}, {"max_extensions": 1.5}, {"on_lost": "not callable"}):
        with pytest.raises(redmutex.InvalidArgument):
            client.lock("z", **kwargs)
    for kwargs in (
        {"min_replicas": -1},
        {"retry_count": -1},
        {"watchdog_lease": 0.01},
        {"connect_timeout": 0},
        {"min_replicas": 2.0},
    ):
        with pytest.raises(redmutex.InvalidArgument):
            redmutex.Client(redis_url, **kwargs)
    assert commands() == 0


@pytest.mark.parametrize(
    "urls",
    [
        pytest.param([], id="empty-list"),
        pytest.param("http://127.0.0.1:6379", id="wrong-scheme"),
        pytest.param("redis://127.0.0.1:notaport", id="bad-port"),
        pytest.param("redis://127.0.0.1:6379\0", id="nul"),
        pytest.param(6379, id="int"),
        pytest.param(None, id="None"),
        pytest.param(["redis://127.0.0.1:1"] * 65, id="too-many"),
    ],
)
def test_bad_urls(urls):
    with pytest.raises(redmutex.InvalidArgument):
        redmutex.Client(urls)


def test_use_after_close(redis_url, r):
    c = redmutex.Client(redis_url)
    lock = c.lock("after")
    rlock = c.rlock("after-r")
    lock.acquire()
    c.close()
    assert c.closed and "closed" in repr(c) and "CLOSED" in repr(lock)
    assert r.exists("after") == 0  # close released it
    for call in (
        lambda: lock.acquire(),
        lock.release,
        lock.locked,
        lock.owned,
        lambda: lock.extend(1),
        lock.force_release,
        lambda: lock.ttl,
        lambda: lock.state,
        lambda: lock.fence,
        lambda: lock.validity,
        lambda: lock.hold_count,
        lambda: rlock.acquire(blocking=False),
        lambda: c.lock("new"),
        lambda: c.rlock("new"),
        c.thread_owner,
        lock.__enter__,
    ):
        with pytest.raises(redmutex.ClosedError):
            call()
    assert issubclass(redmutex.ClosedError, redmutex.RedMutexError)
    c.close()  # idempotent


def test_the_command_counter_sees_real_commands(client, commands):
    # Positive control for the `commands` fixture used above.
    client.lock("counted").acquire(blocking=False)
    assert commands() >= 1


@pytest.mark.parametrize(
    ("option", "value", "minimum"),
    [
        ("watchdog_lease", 0.01, "0.03"),
        ("watchdog_lease", 1e-7, "0.03"),  # positive, below a millisecond
        ("connect_timeout", 0, "0.001"),
        ("command_timeout", 0, "0.001"),
        ("wait_backoff_cap", 0, "0.001"),
        ("replica_timeout", 0, "0.001"),
    ],
)
def test_client_times_below_their_minimum_are_refused_in_seconds(redis_url, option, value, minimum):
    with pytest.raises(redmutex.InvalidArgument) as info:
        redmutex.Client(redis_url, **{option: value})
    message = str(info.value)
    assert f"{option} must be at least {minimum} seconds" in message, message
    assert "_ms" not in message and " ms" not in message and "negative" not in message, message


@pytest.mark.parametrize("value", [0.005, 1e-7, 0])
def test_lock_times_below_their_minimum_are_refused_in_seconds(client, commands, value):
    with pytest.raises(redmutex.InvalidArgument) as info:
        client.lock("t", lease=value)
    assert "lease must be at least 0.01 seconds" in str(info.value), info.value
    for call in (lambda: client.lock("t", max_hold=1e-7), lambda: client.lock("t", lease=5).extend(1e-7)):
        with pytest.raises(redmutex.InvalidArgument) as info:
            call()
        assert "at least 0.001 seconds" in str(info.value) and "positive" not in str(info.value), info.value
    assert commands() == 0


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:{port}?password=hunter22",
        "redis://127.0.0.1:{port}/0?username=bob&password=hunter22",
        "rediss://127.0.0.1:{port}?password=hunter22&ssl_cert_reqs=none",
        "redis://bob:hunter22@127.0.0.1:{port}",
        "redis://127.0.0.1:{port}?pasword=hunter22",  # misspelt: refused, and still not shown
        "redis://127.0.0.1:{port}#password=hunter22",  # a fragment: refused, and not shown
    ],
)
def test_a_password_in_the_url_is_in_no_message(url):
    from conftest import free_port

    url = url.format(port=free_port())
    with pytest.raises(redmutex.RedMutexError) as info, redmutex.Client(url, connect_timeout=0.5) as c:
        c.lock("job").acquire(timeout=0)
    assert "hunter22" not in str(info.value) and "hunter22" not in repr(info.value), info.value
    assert "***" in str(info.value)
