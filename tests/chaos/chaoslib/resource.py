"""The protected resource on the never-faulted server: its scripts (the same
texts as tests/chaos/driver/resource.c) and what the checkers read back.

Keys, per lock name N: ``ctr:N`` naive counter, ``cas:N`` CAS register,
``fmax:N`` largest accepted fencing token, ``flog:N`` accepted fenced writes
("token|hold"), ``frej:N`` rejected ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .resp import Resp, text

FENCED_SCRIPT = (
    "local max = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local tok = tonumber(ARGV[1]) "
    "if tok > max then "
    "  redis.call('SET', KEYS[1], ARGV[1]) "
    "  redis.call('RPUSH', KEYS[2], ARGV[1] .. '|' .. ARGV[2]) "
    "  return 1 "
    "end "
    "redis.call('RPUSH', KEYS[3], ARGV[1] .. '|' .. ARGV[2]) "
    "return 0"
)

CAS_SCRIPT = (
    "local v = redis.call('GET', KEYS[1]) or '0' "
    "if v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 end "
    "return 0"
)


class ResourceClient:
    """What a driver's critical section does to the resource."""

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.r: Resp | None = None

    def _conn(self) -> Resp:
        if self.r is None:
            self.r = Resp(*self.addr, timeout=2.0)
        return self.r

    def _call(self, *args: object) -> object:
        try:
            return self._conn().call(*args)
        except (OSError, ConnectionError):
            if self.r:
                self.r.close()
            self.r = None
            raise

    def read(self, key: str) -> tuple[int, int]:
        ctr, cas = self._conn().pipeline([("GET", f"ctr:{key}"), ("GET", f"cas:{key}")])
        return int(text(ctr) or 0), int(text(cas) or 0)

    def set_counter(self, key: str, value: int) -> None:
        self._call("SET", f"ctr:{key}", value)

    def fenced_write(self, key: str, token: int, hold_id: str) -> int:
        return int(
            self._call("EVAL", FENCED_SCRIPT, 3, f"fmax:{key}", f"flog:{key}", f"frej:{key}", token, hold_id)
        )

    def cas(self, key: str, expect: int, value: int) -> int:
        return int(self._call("EVAL", CAS_SCRIPT, 1, f"cas:{key}", expect, value))

    def close(self) -> None:
        if self.r:
            self.r.close()
        self.r = None


@dataclass
class ResourceState:
    """Final state of the resource for one lock name."""

    counter: int = 0
    cas: int = 0
    accepted: list[tuple[int, str]] = field(default_factory=list)  # (token, hold id) in acceptance order
    rejected: list[tuple[int, str]] = field(default_factory=list)


def read_state(host: str, port: int, names: list[str]) -> dict[str, ResourceState]:
    out: dict[str, ResourceState] = {}
    with Resp(host, port, timeout=10.0) as r:
        for i in range(0, len(names), 200):
            chunk = names[i : i + 200]
            cmds: list[tuple[object, ...]] = []
            for n in chunk:
                cmds += [
                    ("GET", f"ctr:{n}"),
                    ("GET", f"cas:{n}"),
                    ("LRANGE", f"flog:{n}", 0, -1),
                    ("LRANGE", f"frej:{n}", 0, -1),
                ]
            replies = r.pipeline(cmds)
            for j, n in enumerate(chunk):
                ctr, cas, acc, rej = replies[4 * j : 4 * j + 4]
                out[n] = ResourceState(
                    int(text(ctr) or 0),
                    int(text(cas) or 0),
                    [_entry(e) for e in acc],
                    [_entry(e) for e in rej],
                )
    return out


def _entry(raw: bytes) -> tuple[int, str]:
    tok, _, hold = raw.decode().partition("|")
    return int(tok), hold
