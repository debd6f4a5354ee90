"""The Python side of the peer benchmarks: redmutex's Python package, redis-py's
``Lock``, pottery's ``Redlock`` and python-redis-lock, behind the line protocol
of bench/peers (driver.py documents it). Libraries:

  redmutex:lock          ``with client.lock(name):`` (watchdog lease), one Client per URL list
  redis-py               ``redis.Redis().lock(name)``, its defaults (no TTL, 0.1 s polling sleep)
  redis-py:tuned         the same with ``sleep=0.005``
  pottery                ``Redlock(key=name, masters=...)``, its defaults (10 s lease,
                         retry after uniform(0, 0.2) s)
  pottery:tuned          the same, retrying after uniform(0, 0.01) s
  python-redis-lock      ``redis_lock.Lock(redis, name)``, its defaults (no TTL, waits on BLPOP);
                         in the hold series ``expire=30, auto_renewal=True``
"""

from __future__ import annotations

import resource
import sys
import time

import pottery
import redis
import redis_lock
import redmutex


def cpu_ns() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


class TunedRedlock(pottery.Redlock):
    _RETRY_DELAY = 0.01


_clients: dict[tuple, object] = {}


def redis_client(url: str) -> redis.Redis:
    key = ("redis", url)
    if key not in _clients:
        _clients[key] = redis.Redis.from_url(url)
    return _clients[key]


def redmutex_client(urls: list[str]) -> redmutex.Client:
    key = ("redmutex", tuple(urls))
    if key not in _clients:
        _clients[key] = redmutex.Client(urls if len(urls) > 1 else urls[0])
    return _clients[key]


class Peer:
    """One library's lock object on one name, with acquire/release as the library spells them."""

    def __init__(self, lib: str, name: str, urls: list[str], hold: bool = False):
        self.lib = lib
        self.urls = urls
        if lib == "redmutex:lock":
            self.lock = redmutex_client(urls).lock(name)
            self.acquire = self.lock.acquire
            self.release = self.lock.release
            return
        if lib in ("pottery", "pottery:tuned"):
            cls = TunedRedlock if lib == "pottery:tuned" else pottery.Redlock
            self.lock = cls(key=name, masters={redis_client(u) for u in urls})
            self.acquire = self.lock.acquire
            self.release = self.lock.release
            return
        if len(urls) != 1:
            raise SystemExit(f"{lib} locks one server only")
        r = redis_client(urls[0])
        if lib == "redis-py":
            self.lock = r.lock(name)
        elif lib == "redis-py:tuned":
            self.lock = r.lock(name, sleep=0.005)
        elif lib == "python-redis-lock":
            self.lock = (
                redis_lock.Lock(r, name, expire=30, auto_renewal=True) if hold else redis_lock.Lock(r, name)
            )
        else:
            raise SystemExit(f"unknown library {lib}")
        self.acquire = self.lock.acquire
        self.release = self.lock.release

    def pair(self) -> None:
        if self.lib == "redmutex:lock":
            with self.lock:  # the form the package is meant to be used in
                pass
        else:
            self.acquire()
            self.release()


_peers: dict[tuple, Peer] = {}


def peer(lib: str, name: str, urls: list[str]) -> Peer:
    key = (lib, name, tuple(urls))
    if key not in _peers:
        _peers[key] = Peer(lib, name, urls)
    return _peers[key]


def cmd_pairs(p: Peer, seconds: float) -> str:
    n = 0
    t0, c0 = time.monotonic_ns(), cpu_ns()
    end = t0 + int(seconds * 1e9)
    while True:
        for _ in range(10):
            p.pair()
        n += 10
        t = time.monotonic_ns()
        if t >= end:
            return f"ok {n} {t - t0} {cpu_ns() - c0}"


def cmd_contend(p: Peer, start: int, end: int, hold_us: int) -> str:
    events: list[int] = []
    failures = 0
    time.sleep(max(0, start - time.monotonic_ns()) / 1e9)
    while time.monotonic_ns() < end:
        try:
            ok = p.acquire()
        except Exception:  # noqa: BLE001 (a library that gives up: counted, as the other peers do)
            ok = False
        if not ok:
            failures += 1
            continue
        got = time.monotonic_ns()
        time.sleep(hold_us / 1e6)
        rel = time.monotonic_ns()
        p.release()
        events += (got, rel, time.monotonic_ns())
    return "ok " + " ".join(map(str, [failures, *events]))


_held: dict[tuple, tuple[list, int]] = {}


def cmd_hold(lib: str, name: str, count: int, urls: list[str]) -> str:
    if lib not in ("redmutex:lock", "python-redis-lock"):
        raise SystemExit(f"{lib} has no renewal")
    locks = [Peer(lib, f"{name}:{i}", urls, hold=True) for i in range(count)]
    for p in locks:
        p.acquire()
    _held[(lib, name)] = (locks, cpu_ns())
    return "held"


def cmd_unhold(lib: str, name: str) -> str:
    locks, c0 = _held.pop((lib, name))
    cpu = cpu_ns() - c0
    lost = 0
    for p in locks:
        try:
            p.release()
        except Exception:  # noqa: BLE001 (whatever the library raises for a lock it no longer holds)
            lost += 1
    return f"ok {cpu} {lost}"


def main() -> None:
    for line in sys.stdin:
        tok = line.split()
        if not tok:
            continue
        if tok[0] == "quit":
            break
        op, lib, name = tok[0], tok[1], tok[2]
        urls = [t for t in tok[3:] if t.startswith("redis://")]
        args = [t for t in tok[3:] if not t.startswith("redis://")]
        if op == "pairs":
            out = cmd_pairs(peer(lib, name, urls), float(args[0]))
        elif op == "contend":
            out = cmd_contend(peer(lib, name, urls), int(args[0]), int(args[1]), int(args[2]))
        elif op == "acquire":
            p = peer(lib, name, urls)
            print(f"started {time.monotonic_ns()}", flush=True)
            p.acquire()
            out = f"ok {time.monotonic_ns()}"
        elif op == "release":
            p = peer(lib, name, urls)
            t0 = time.monotonic_ns()
            p.release()
            out = f"ok {t0} {time.monotonic_ns()}"
        elif op == "hold":
            out = cmd_hold(lib, name, int(args[0]), urls)
        elif op == "unhold":
            out = cmd_unhold(lib, name)
        else:
            raise SystemExit(f"unknown command {op}")
        print(out, flush=True)


if __name__ == "__main__":
    main()
