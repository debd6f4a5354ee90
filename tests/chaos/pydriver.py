"""The Python driver of the chaos harness: the same workload and step modes as
tests/chaos/driver (the C driver), through the redmutex package, with the same
command line and the same JSONL history on stdout (CLOCK_MONOTONIC stamps).

stdin commands: "stop" (finish, release, report), "exit", "probe NAME".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redmutex
from chaoslib.resource import ResourceClient
from chaoslib.resp import Resp, text

_NEVER = threading.Event()


def _sleep(seconds: float) -> None:
    """time.sleep, but by a timed wait: under libfaketime (S12 moves this process's
    wall clock) CPython's time.sleep fails with EINVAL, a timed wait does not."""
    _NEVER.wait(max(0.0, seconds))


CODE_NAMES = [
    "OK",
    "EINVAL",
    "ENOMEM",
    "ETIMEDOUT",
    "ENOTOWNER",
    "ELOST",
    "ECONN",
    "EPROTOCOL",
    "ESERVER",
    "EWRONGTYPE",
    "EAUTH",
    "EFORKED",
    "EDUPLICATE",
    "EREPLICAS",
    "ECLOSED",
    "EINTR",
    "ELIMIT",
    "EUNSUPPORTED",
]
STATE_NAMES = {0: "UNLOCKED", 1: "HELD", 2: "FAILING", 3: "LOST"}


class Log:
    def __init__(self, pid: str) -> None:
        self.pid = pid
        self.mu = threading.Lock()

    def __call__(self, w: int, h: int, ev: str, t: int | None = None, **fields: Any) -> None:
        """Logs an event. `t` (taken before reading a validity) keeps t + validity from
        overstating the client's belief when a pause falls between the read and the log."""
        stamp = time.monotonic_ns() if t is None else t
        line = json.dumps({"t": stamp, "p": self.pid, "w": w, "h": h, "ev": ev, **fields})
        with self.mu:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def error(self, w: int, h: int, ev: str, exc: BaseException, t0: int) -> None:
        code = getattr(exc, "code", 0) or 0
        name = CODE_NAMES[-code] if 0 < -code < len(CODE_NAMES) else type(exc).__name__
        self(w, h, ev, rc=code, err=name, msg=str(exc), dur_ms=(time.monotonic_ns() - t0) / 1e6)

    def stats(self) -> None:
        fds = len(os.listdir("/proc/self/fd")) - 1
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        self(-1, 0, "stats", fds=fds, rss_kb=rss)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--id", default="py")
    ap.add_argument("--mode", default="workload")
    ap.add_argument("--url", action="append", required=True)
    ap.add_argument("--resource", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keys", type=int, default=1)
    ap.add_argument("--prefix", default="lk:")
    ap.add_argument("--kind", default="lock")
    ap.add_argument("--lease", type=int, default=0)
    ap.add_argument("--watchdog-lease", type=int, default=1000)
    ap.add_argument("--no-fencing", action="store_true")
    ap.add_argument("--cs", default="5:20")
    ap.add_argument("--think", type=int, default=0)
    ap.add_argument("--wait", type=int, default=2000)
    ap.add_argument("--nest", type=int, default=1)
    ap.add_argument("--hold-margin", type=int, default=0)
    ap.add_argument("--owner-per-hold", action="store_true")
    ap.add_argument("--owner-fixed", action="store_true")
    ap.add_argument("--cmd-timeout", type=int, default=200)
    ap.add_argument("--connect-timeout", type=int, default=300)
    ap.add_argument("--backoff-cap", type=int, default=100)
    ap.add_argument("--retry-delay", type=int, default=50)
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--replica-timeout", type=int, default=200)
    ap.add_argument("--leave-on-free", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=0)
    a = ap.parse_args(argv)
    lo, _, hi = a.cs.partition(":")
    a.cs_min, a.cs_max = int(lo), int(hi or lo)
    a.res_host, _, port = a.resource.rpartition(":")
    a.res_port = int(port)
    return a


def make_client(a: argparse.Namespace) -> redmutex.Client:
    return redmutex.Client(
        a.url if len(a.url) > 1 else a.url[0],
        watchdog_lease=a.watchdog_lease / 1000,
        command_timeout=a.cmd_timeout / 1000,
        connect_timeout=a.connect_timeout / 1000,
        wait_backoff_cap=a.backoff_cap / 1000,
        retry_delay=a.retry_delay / 1000,
        min_replicas=None if a.min_replicas < 0 else a.min_replicas,  # -1: the deployment's default
        replica_timeout=a.replica_timeout / 1000,
        shutdown_timeout=2.0,
        leave_locks_on_close=a.leave_on_free,
    )


class Commands:
    """stdin lines, with a timeout (select on the raw descriptor)."""

    def __init__(self) -> None:
        self.pending = b""

    def read(self, timeout: float | None) -> str | None:
        """A line, "" after the timeout, None at EOF."""
        while b"\n" not in self.pending:
            ready, _, _ = select.select([0], [], [], timeout)
            if not ready:
                return ""
            chunk = os.read(0, 4096)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode().strip()

    def wait_for(self, word: str, log: Log) -> None:
        while True:
            line = self.read(5.0)
            if line is None or line in (word, "exit"):
                return
            if line == "":
                log.stats()


# ---- workload ------------------------------------------------------------------


class Worker(threading.Thread):
    def __init__(
        self, a: argparse.Namespace, client: redmutex.Client, log: Log, idx: int, stop: threading.Event
    ):
        super().__init__(daemon=True)
        self.a, self.client, self.log, self.idx, self.stop = a, client, log, idx, stop
        self.rng = random.Random(a.seed * 1000003 + idx + 1)
        self.res = ResourceClient(a.res_host, a.res_port)
        self.locks: dict[int, Any] = {}
        self.holds = 0
        self.current = 0
        self.watched: Any = None  # the lock of the hold in progress, for the monitor
        self.watched_end = 0

    def lock_for(self, k: int, name: str, owner: str | None) -> Any:
        if self.a.owner_per_hold:
            return self.make_lock(name, owner)
        if k not in self.locks:
            self.locks[k] = self.make_lock(name, owner)
        return self.locks[k]

    def make_lock(self, name: str, owner: str | None) -> Any:
        a = self.a

        def on_lost(lock: Any, state: Any) -> None:
            t = time.monotonic_ns()
            self.log(
                self.idx,
                self.current,
                "lost_cb",
                t=t,
                state=STATE_NAMES[int(state)],
                val=round(lock.validity * 1000),
                key=name,
            )

        make = self.client.rlock if a.kind == "rlock" else self.client.lock
        return make(
            name,
            lease=a.lease / 1000 if a.lease else None,
            fencing=not a.no_fencing,
            owner=owner,
            on_lost=on_lost,
        )

    def check(self, lock: Any, h: int, at: str) -> None:
        t = time.monotonic_ns()
        self.log(self.idx, h, "chk", t=t, at=at, val=round(lock.validity * 1000), state=int(lock.state))

    def run(self) -> None:
        a = self.a
        while not self.stop.is_set() and (a.ops == 0 or self.holds < a.ops):
            self.one_hold()
            if a.think:
                _sleep(self.rng.randint(0, a.think) / 1000)
        self.res.close()
        self.log(self.idx, 0, "worker_done", holds=self.holds)

    def one_hold(self) -> None:
        a = self.a
        self.holds += 1
        h = self.current = self.holds
        k = self.rng.randint(0, a.keys - 1)
        name = f"{a.prefix}{k}"
        if a.kind == "rlock":
            owner: str | None = f"{self.client.id}:py{self.idx}"
        elif a.owner_per_hold:
            owner = f"{a.id}-{self.idx}-{h}"
        elif a.owner_fixed:
            owner = f"{a.id}-w{self.idx}"
        else:
            owner = None
        lock = self.lock_for(k, name, owner)
        self.log(self.idx, h, "acq", key=name, owner=owner or "")
        t0 = time.monotonic_ns()
        try:
            got = lock.acquire(timeout=a.wait / 1000)
        except redmutex.RedMutexError as e:
            self.log.error(self.idx, h, "acq_err", e, t0)
            if isinstance(e, redmutex.LockLostError):
                self.release_all(lock, name, h, 1, k)
            else:
                _sleep(self.rng.randint(10, 50) / 1000)  # servers unreachable: do not spin
            return
        if not got:
            self.log(
                self.idx,
                h,
                "acq_err",
                rc=-3,
                err="ETIMEDOUT",
                msg="timed out",
                dur_ms=(time.monotonic_ns() - t0) / 1e6,
            )
            return
        fence = lock.fence or 0
        t_ok = time.monotonic_ns()
        self.log(
            self.idx,
            h,
            "acq_ok",
            t=t_ok,
            key=name,
            fence=fence,
            val=round(lock.validity * 1000),
            dur_ms=(time.monotonic_ns() - t0) / 1e6,
        )
        self.watched_end, self.watched = 0, lock
        depth = self.nested(lock, name, h)
        self.critical_section(lock, name, h, fence)
        self.watched = None
        self.release_all(lock, name, h, depth, k)

    def nested(self, lock: Any, name: str, h: int) -> int:
        depth = 1
        for level in range(2, self.a.nest + 1 if self.a.kind == "rlock" else 2):
            self.log(self.idx, h, "nest", key=name, lvl=level)
            t0 = time.monotonic_ns()
            try:
                if not lock.acquire(blocking=False):
                    self.log(self.idx, h, "nest_err", rc=-3, err="ETIMEDOUT", msg="", dur_ms=0)
                    break
            except redmutex.RedMutexError as e:
                self.log.error(self.idx, h, "nest_err", e, t0)
                break
            self.log(self.idx, h, "nest_ok", key=name, lvl=level, fence=lock.fence or 0)
            depth += 1
        return depth

    def critical_section(self, lock: Any, name: str, h: int, fence: int) -> None:
        a = self.a
        self.check(lock, h, "read")
        try:
            counter, cas = self.res.read(name)
        except (OSError, ConnectionError):
            self.log(self.idx, h, "res_err", op="read")
            return
        self.log(self.idx, h, "cs_read", key=name, v=counter, cas=cas)
        if a.hold_margin:
            _sleep(max(0.0, lock.validity - a.hold_margin / 1000))
        else:
            _sleep(self.rng.randint(a.cs_min, a.cs_max) / 1000)
        if not a.no_fencing:
            self.check(lock, h, "fenced")
            acc = self.res.fenced_write(name, fence, f"{a.id}:{self.idx}:{h}")
            self.log(self.idx, h, "fenced", key=name, tok=fence, acc=acc)
        self.check(lock, h, "cas")
        ok = self.res.cas(name, cas, cas + 1)
        self.log(self.idx, h, "cas", key=name, ok=ok, **{"from": cas})
        self.check(lock, h, "set")
        self.res.set_counter(name, counter + 1)
        self.log(self.idx, h, "cset", key=name, v=counter + 1, ok=1)

    def release_all(self, lock: Any, name: str, h: int, depth: int, k: int) -> None:
        for level in range(depth, 0, -1):
            for attempt in range(3):
                self.check(lock, h, "retry" if attempt else "release")
                self.log(self.idx, h, "rel", key=name, lvl=level, **{"try": attempt})
                t0 = time.monotonic_ns()
                try:
                    lock.release()
                    self.log(
                        self.idx, h, "rel_ok", key=name, lvl=level, dur_ms=(time.monotonic_ns() - t0) / 1e6
                    )
                    break
                except (redmutex.ConnectionError, redmutex.ServerError) as e:
                    self.log.error(self.idx, h, "rel_err", e, t0)
                except redmutex.RedMutexError as e:
                    self.log.error(self.idx, h, "rel_err", e, t0)
                    return
            else:
                self.log(self.idx, h, "rel_gaveup", key=name)
                self.locks.pop(k, None)
                return


def monitor(a: argparse.Namespace, workers: list[Worker], log: Log, stop: threading.Event) -> None:
    """Logs a "chk" whenever a hold's validity end moves (a renewal went through)."""
    period = max(0.005, (a.lease or a.watchdog_lease) / 20 / 1000)
    while True:
        asleep = time.monotonic()
        if stop.wait(period):
            break
        late_ms = (time.monotonic() - asleep - period) * 1000
        if late_ms >= 20:  # this process was not scheduled: C6 does not blame the library for it
            log(-1, 0, "late_wakeup", ms=round(late_ms))
        for w in workers:
            lock, h = w.watched, w.current
            if lock is None:
                continue
            t = time.monotonic_ns()
            try:
                v = lock.validity
            except redmutex.RedMutexError:
                continue
            end = t + int(v * 1e9)
            if v > 0 and abs(end - w.watched_end) > 3_000_000:
                w.watched_end = end
                log(w.idx, h, "chk", t=t, at="mon", val=round(v * 1000))


def run_workload(a: argparse.Namespace, client: redmutex.Client, log: Log, cmds: Commands) -> None:
    stop = threading.Event()
    workers = [Worker(a, client, log, i, stop) for i in range(a.threads)]
    for w in workers:
        w.start()
    mon = threading.Thread(target=monitor, args=(a, workers, log, stop), daemon=True)
    mon.start()
    cmds.wait_for("stop", log)
    stop.set()
    for w in workers:
        w.join()
    mon.join()
    log(-1, 0, "stopped")
    log.stats()
    cmds.wait_for("exit", log)


# ---- step modes -------------------------------------------------------------------


class Steps:
    def __init__(self, a: argparse.Namespace, log: Log) -> None:
        self.a, self.log = a, log

    def step(self, name: str, fn: Any, *allowed: str) -> bool:
        try:
            fn()
            got, msg = "OK", ""
        except redmutex.RedMutexError as e:
            code = getattr(e, "code", 0) or 0
            got, msg = (CODE_NAMES[-code] if 0 < -code < len(CODE_NAMES) else type(e).__name__), str(e)
        ok = got in allowed
        self.log(0, 0, "step", name=name, err=got, expect="|".join(allowed), **{"pass": int(ok)}, msg=msg)
        return ok

    def fact(self, name: str, ok: bool, detail: str = "") -> bool:
        self.log(0, 0, "step", name=name, **{"pass": int(bool(ok))}, msg=detail)
        return ok

    def raw_all(self, *cmd: object) -> list[Any]:
        out = []
        for url in self.a.url:
            host, _, port = url.removeprefix("redis://").partition(":")
            try:
                with Resp(host, int(port), timeout=1.0) as r:
                    out.append(r.call(*cmd))
            except (OSError, ConnectionError):
                out.append(None)
        return out

    def expect_acquired(self, lock: Any) -> None:
        if not lock.acquire(timeout=1.0):
            raise redmutex.LockTimeout("not acquired", -3)


def run_nonowner(a: argparse.Namespace, client: redmutex.Client, log: Log) -> None:
    s = Steps(a, log)
    other = make_client(a)
    p = a.prefix
    la, lb = client.lock(f"{p}fg"), other.lock(f"{p}fg")
    s.step("plain: owner acquires", lambda: s.expect_acquired(la), "OK")
    s.step("plain: other lock object releases", lb.release, "ENOTOWNER")
    s.step("plain: other lock object extends", lambda: lb.extend(5.0), "ENOTOWNER")
    forged = other.lock(f"{p}fg", owner="forged-token")
    s.step("plain: forged token releases", forged.release, "ENOTOWNER")
    s.step("plain: forged token extends", lambda: forged.extend(5.0, replace=True), "ENOTOWNER")
    s.fact("plain: owner still holds after foreign calls", la.owned())
    s.raw_all("SET", f"{p}fg", "intruder", "PX", 5000)
    s.step("plain: release after overwrite", la.release, "ELOST", "ENOTOWNER")
    s.fact(
        "plain: overwritten key intact after release",
        all(text(v) == "intruder" for v in s.raw_all("GET", f"{p}fg")),
    )
    s.raw_all("DEL", f"{p}fg")

    sa, sb = client.lock(f"{p}stale", lease=0.3), other.lock(f"{p}stale", lease=5.0)
    s.step("stale: owner acquires with a short lease", lambda: s.expect_acquired(sa), "OK")
    _sleep(0.4)
    s.step("stale: other client acquires after expiry", lambda: s.expect_acquired(sb), "OK")
    s.step("stale: expired lock object extends", lambda: sa.extend(5.0), "ELOST", "ENOTOWNER")
    s.step("stale: expired lock object releases", sa.release, "ELOST", "ENOTOWNER")
    s.fact("stale: new holder still owns", sb.owned())
    s.step("stale: new holder releases", sb.release, "OK")

    owner = f"{client.id}:steps"
    ra, rb = client.rlock(f"{p}rfg", owner=owner), other.rlock(f"{p}rfg")
    s.step("rlock: owner acquires", lambda: s.expect_acquired(ra), "OK")
    s.step("rlock: other client's thread releases", rb.release, "ENOTOWNER")
    s.step("rlock: other client's thread extends", lambda: rb.extend(5.0), "ENOTOWNER")
    s.fact("rlock: owner still holds", ra.owned())
    ra2 = client.rlock(f"{p}rfg", owner=owner)
    s.raw_all("DEL", f"{p}rfg")
    s.step(
        "rlock: second lock object of the same owner acquires after the key vanished",
        lambda: s.expect_acquired(ra2),
        "OK",
    )
    # Same owner, two lock objects: one owner in Redisson's model, so the first object's
    # release counts against the second's hold. Reported, not judged.
    try:
        ra.release()
        got = "OK"
    except redmutex.RedMutexError as e:
        got = CODE_NAMES[-e.code] if 0 < -e.code < len(CODE_NAMES) else type(e).__name__
    log(
        0,
        0,
        "observe",
        name="rlock: same owner, second lock object after the key vanished; first object's release",
        err=got,
        second_hold_count=ra2.hold_count,
    )
    s.raw_all("DEL", f"{p}rfg")
    s.raw_all("HSET", f"{p}rfg", "intruder:1", 1)
    s.raw_all("PEXPIRE", f"{p}rfg", 5000)
    s.step("rlock: release after another owner took the hash", ra2.release, "ELOST", "ENOTOWNER")
    s.fact(
        "rlock: other owner's field intact",
        all(text(v) == "1" for v in s.raw_all("HGET", f"{p}rfg", "intruder:1")),
    )
    s.raw_all("DEL", f"{p}rfg")
    other.close()
    log(0, 0, "steps_done")


def run_reentrant(a: argparse.Namespace, client: redmutex.Client, log: Log) -> None:
    s = Steps(a, log)
    name = f"{a.prefix}nest"
    for depth in (1, 3, 5):
        lock = client.rlock(name, fencing=True)
        counts, fences, outer = True, True, None
        for level in range(1, depth + 1):
            s.step(f"nested: acquire level {level}", lambda lock=lock: s.expect_acquired(lock), "OK")
            fence = lock.fence
            outer = fence if level == 1 else outer
            counts &= lock.hold_count == level
            fences &= fence == outer
            log(0, 0, "nest_ok", key=name, lvl=level, count=lock.hold_count, fence=fence)
        for level in range(depth, 0, -1):
            s.step(f"nested: release level {level}", lock.release, "OK")
            counts &= lock.hold_count == level - 1
        s.fact("nested: server hold count equals the local depth at every level", counts)
        s.fact("nested: every level reports the outer acquisition's token", fences)
        s.fact("nested: nothing left after the last release", all(v == 0 for v in s.raw_all("EXISTS", name)))

    vname = f"{a.prefix}vanish"

    def on_lost(lock: Any, state: Any) -> None:
        log(0, 0, "lost_cb", state=STATE_NAMES[int(state)], val=0, key=vname)

    lock = client.rlock(vname, fencing=True, on_lost=on_lost)
    s.step("vanish: acquire level 1", lambda lock=lock: s.expect_acquired(lock), "OK")
    s.step("vanish: acquire level 2", lambda lock=lock: s.expect_acquired(lock), "OK")
    s.raw_all("DEL", vname)
    log(0, 0, "vanished", key=vname)
    s.step("vanish: nested acquire after the key vanished", lambda: lock.acquire(blocking=False), "ELOST")
    s.fact(
        "vanish: the nested acquire left nothing on the servers",
        all(v == 0 for v in s.raw_all("EXISTS", vname)),
    )
    s.fact(
        "vanish: the hold is reported LOST",
        lock.state in (redmutex.LockState.LOST, redmutex.LockState.UNLOCKED),
    )
    s.step("vanish: release reports the loss", lock.release, "ELOST")
    _sleep(0.05)
    log(0, 0, "steps_done")


def run_fork(a: argparse.Namespace, client: redmutex.Client, log: Log) -> None:
    s = Steps(a, log)
    for label, make in (("plain", client.lock), ("rlock", client.rlock)):
        lock = make(f"{a.prefix}fork:{label}")
        s.step(f"{label}: parent acquires (watchdog)", lambda lock=lock: s.expect_acquired(lock), "OK")
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            log.pid = "fork-child"
            ok = s.step(f"{label}: child releases", lock.release, "EFORKED", "ENOTOWNER")
            ok &= s.step(
                f"{label}: child extends",
                lambda lock=lock: lock.extend(60.0, replace=True),
                "EFORKED",
                "ENOTOWNER",
            )
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        s.fact(f"{label}: child exited cleanly", os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
        s.fact(f"{label}: parent still owns after the child's attempts", lock.owned())
        _sleep(2 * a.watchdog_lease / 1000)
        s.fact(
            f"{label}: parent's watchdog keeps it for 2 leases",
            lock.state == redmutex.LockState.HELD and lock.owned(),
        )
        s.step(f"{label}: parent releases", lock.release, "OK")
    log(0, 0, "steps_done")


def run_probe(a: argparse.Namespace, client: redmutex.Client, log: Log, cmds: Commands) -> None:
    while (line := cmds.read(None)) is not None:
        if line == "exit":
            return
        if not line.startswith("probe "):
            continue
        name = line[6:]
        lock = client.lock(name, lease=a.lease / 1000 if a.lease else None)
        t0 = time.monotonic_ns()
        try:
            ok = lock.acquire(blocking=False)
            rc, err, msg = (0, "OK", "") if ok else (-3, "ETIMEDOUT", "held")
        except redmutex.RedMutexError as e:
            ok, rc, err, msg = False, e.code, CODE_NAMES[-e.code] if e.code < 0 else "?", str(e)
        dur = (time.monotonic_ns() - t0) / 1e6
        log(
            0,
            0,
            "probe",
            key=name,
            rc=rc,
            err=err,
            dur_ms=dur,
            val=round(lock.validity * 1000) if ok else 0,
            msg=msg,
        )
        if ok:
            t0 = time.monotonic_ns()
            try:
                lock.release()
                rr, rerr = 0, "OK"
            except redmutex.RedMutexError as e:
                rr, rerr = e.code, type(e).__name__
            log(0, 0, "probe_rel", key=name, rc=rr, err=rerr, dur_ms=(time.monotonic_ns() - t0) / 1e6)
        log(0, 0, "probe_done", key=name)


def run_hold(
    a: argparse.Namespace, client: redmutex.Client, log: Log, cmds: Commands, held: list[Any]
) -> None:
    """Takes --keys watchdog locks and keeps them until "exit"; close() then runs with all of
    them held (the caller keeps the lock objects alive across close())."""
    for k in range(a.keys):
        lock = client.lock(f"{a.prefix}{k}")
        t0 = time.monotonic_ns()
        try:
            if lock.acquire(timeout=2.0):
                held.append(lock)
        except redmutex.RedMutexError as e:
            log.error(0, k, "acq_err", e, t0)
    log(0, 0, "holding", held=len(held))
    while (line := cmds.read(None)) is not None and line != "exit":
        pass


def main() -> int:
    a = parse_args(sys.argv[1:])
    log = Log(a.id)
    try:
        client = make_client(a)
    except redmutex.RedMutexError as e:
        log.error(-1, 0, "client_err", e, time.monotonic_ns())
        return 69
    log(-1, 0, "start", lang="py", pid=os.getpid(), client=client.id, mode=a.mode)
    log.stats()
    cmds = Commands()
    modes = {
        "workload": lambda: run_workload(a, client, log, cmds),
        "nonowner": lambda: run_nonowner(a, client, log),
        "reentrant": lambda: run_reentrant(a, client, log),
        "fork": lambda: run_fork(a, client, log),
        "probe": lambda: run_probe(a, client, log, cmds),
        "hold": lambda: run_hold(a, client, log, cmds, kept),
    }
    kept: list[Any] = []
    modes[a.mode]()
    log.stats()
    t0 = time.monotonic_ns()
    client.close()
    log(-1, 0, "end", rc=0, free_ms=(time.monotonic_ns() - t0) / 1e6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
