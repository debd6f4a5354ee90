"""The Pythonic layer: Client, Lock, RLock over the C core.

Three things here need care, and the comments say why:

* Lifetimes. The C core lets clients and lock handles be freed in any order,
  from any thread, without blocking, and gives calls that race a close a
  defined error (ClosedError). So a Lock frees its C handle in its finalizer,
  a Client frees its C client in its own (after close() or not: the core then
  closes it in the background), and no Python-side gate is needed.
* Lost-lock news. No Python code runs on the core's watchdog thread. The
  ``on_lost`` callables of a client's locks run on one thread of the package
  that reads the client's event fd (_events.py); exceptions they raise are
  stored and re-raised at the next call on that lock.
* Waits. A blocking acquire runs with the GIL released. Signals that have a
  Python handler end the main thread's waits through
  redmutex_client_interrupt() from a C-level handler (_signals.py); the
  pending Python handlers then run, and a Ctrl-C raises KeyboardInterrupt
  with nothing held. close() ends waits of other threads with ClosedError.
"""

from __future__ import annotations

import atexit
import collections
import functools
import inspect
import math
import os
import ssl
import threading
import time
import weakref
from typing import Any, Callable, Sequence, TypeVar, cast

from . import _events, _logging, _signals, _stats
from ._args import (
    _WAIT_FOREVER,
    _WATCHDOG_LEASE_MIN_MS,
    Name,
    _acquire_wait_ms,
    _add_note,
    _to_bytes,
    _to_count,
    _to_ms,
)
from ._base import ClientBase, LockBase, LockInfo, LockState, ReadWriteBase, _exit_release, _inspect
from ._errors import ClosedError, InvalidArgument, LockLostError, NotOwnedError, check
from ._redmutex_cffi import ffi, lib

__all__ = ["Client", "FairLock", "Lock", "LockState", "RLock", "ReadLock", "ReadWriteLock", "WriteLock"]

F = TypeVar("F", bound=Callable[..., Any])

_ETIMEDOUT: int = lib.REDMUTEX_ETIMEDOUT
_EINTR: int = lib.REDMUTEX_EINTR


def _tls_path(value: object, what: str) -> bytes:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        value = os.fsencode(value)
    return _to_bytes(value, what, 4096)


def _tls_options(opts: Any, **kwargs: Any) -> list[Any]:
    """Sets the TLS fields of the C options; returns the C strings to keep alive."""
    keep: list[Any] = []
    for name, field in (
        ("ssl_ca_certs", "tls_ca_file"),
        ("ssl_certfile", "tls_cert_file"),
        ("ssl_keyfile", "tls_key_file"),
    ):
        if kwargs[name] is not None:
            keep.append(ffi.new("char[]", _tls_path(kwargs[name], name)))
            setattr(opts, field, keep[-1])
    name = kwargs["ssl_server_hostname"]
    if name is not None:
        keep.append(ffi.new("char[]", _to_bytes(name, "ssl_server_hostname", 253)))
        opts.tls_server_name = keep[-1]
    reqs = kwargs["ssl_cert_reqs"]
    if reqs is not None:
        if reqs in ("none", ssl.CERT_NONE) and not isinstance(reqs, bool):
            opts.flags |= lib.REDMUTEX_CLIENT_TLS_NO_VERIFY
        elif reqs not in ("required", ssl.CERT_REQUIRED) or isinstance(reqs, bool):
            raise InvalidArgument(
                f"ssl_cert_reqs must be 'required' or 'none' (or ssl.CERT_REQUIRED / ssl.CERT_NONE), "
                f"not {reqs!r}"
            )
    check_hostname = kwargs["ssl_check_hostname"]
    if check_hostname is not None:
        if not isinstance(check_hostname, bool):
            raise InvalidArgument(
                f"ssl_check_hostname must be True or False, not {type(check_hostname).__name__}"
            )
        if not check_hostname:
            opts.flags |= lib.REDMUTEX_CLIENT_TLS_NO_HOSTNAME_CHECK
    return keep


# ---- client lifetime --------------------------------------------------------

# Every open client, so that the interpreter's exit can close them (releasing
# their locks) before the process ends.
_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for client in list(_live_clients):
        client.close()


atexit.register(_close_all_at_exit)


class _CClient:
    """The C client pointer and the event thread, apart from Client so that
    the finalizer can reach them without keeping the Client alive."""

    __slots__ = ("id", "mu", "ptr", "pump")

    def __init__(self, ptr: Any, client_id: str) -> None:
        self.ptr = ptr
        self.id = client_id
        self.pump: _events.EventPump | None = None
        self.mu = threading.Lock()

    def pump_events(self) -> None:
        """Starts delivering lost-lock events to on_lost callables."""
        with self.mu:
            if self.pump is None:
                self.pump = _events.EventPump(self.ptr, self.id)
            pump = self.pump
        pump.ensure_running()

    def stop_events(self) -> None:
        with self.mu:
            pump = self.pump
        if pump is not None:
            pump.stop(free_client=False)

    def free(self) -> None:
        """Finalizer: drops the C client. Never blocks (the core closes it in
        the background if close() was not called)."""
        with self.mu:
            pump, self.pump = self.pump, None
        if pump is not None:
            pump.stop(free_client=True)
        else:
            lib.redmutex_client_free(self.ptr)


# ---- Client --------------------------------------------------------------


class Client(ClientBase):
    """A connection to one Redis server, or to N independent masters (Redlock).

    ``url_or_list`` is one URL or a list of them:
    ``redis://[user[:password]@]host[:port][/db]``,
    ``unix:///path/to/socket[?db=N]`` or, for a master behind Sentinel,
    ``redis+sentinel://[user:password@]s1:26379,s2:26379/SERVICE[/db]``
    (``?sentinel_password=`` for the sentinels' own AUTH). With N URLs every
    lock is taken on all N deployments at once and needs N/2+1 of them.

    All times are in seconds (floats are fine); ``None`` means the C
    library's default, shown in brackets:

    * ``watchdog_lease`` - lease of locks made without ``lease=``; the
      watchdog renews it every third of it while held (30.0).
    * ``connect_timeout`` - connecting plus the AUTH/SELECT handshake (2.0).
    * ``command_timeout`` - one round trip to one server; with N servers the
      Redlock per-server timeout, keep it well below the leases (1.0).
    * ``wait_backoff_cap`` - longest gap between two attempts of a waiting
      acquire when no release is published, e.g. while a redis-py lock is
      the holder (1.0).
    * ``min_replicas`` / ``replica_timeout`` - after acquire, extend and
      renew, ``WAIT min_replicas replica_timeout``; fewer acknowledgements
      fail the acquire and release the lock (0 = off / 1.0). ``None``: each
      deployment's default, 1 on a Sentinel deployment (as far as its
      master really has a replica) and 0 elsewhere.
    * ``retry_count`` / ``retry_delay`` - Redlock: most attempts per acquire
      call (0 = as many as the wait allows), and the longest random pause
      after a split vote (0 / 0.2).
    * ``shutdown_timeout`` - bound on how long close() spends releasing locks
      and stopping the background threads (2.0).
    * ``leave_locks_on_close`` - close() leaves held locks to expire instead
      of releasing them.
    * ``count_stats`` - count what stats() reports (default True; False
      saves a few atomic additions per operation, stats() then reports zeros).

    TLS (``rediss://`` URLs) takes redis-py's options, as keyword arguments
    or as the URL's query options (the URL's win):

    * ``ssl_ca_certs`` - PEM file of the CA certificates to trust (default:
      the system trust store).
    * ``ssl_certfile`` / ``ssl_keyfile`` - client certificate chain and its
      key (PEM, no passphrase) for mutual TLS; the key may be in the
      certificate file.
    * ``ssl_cert_reqs`` - ``"required"`` (default) or ``"none"`` (also
      ``ssl.CERT_REQUIRED`` / ``ssl.CERT_NONE``): ``"none"`` turns
      certificate verification off - anyone on the network path can then
      pose as the server.
    * ``ssl_check_hostname`` - verify that the certificate names the server
      (default True).
    * ``ssl_server_hostname`` - the name sent as SNI and verified (default:
      each URL's host).

    Certificates and host names are verified unless turned off explicitly.
    A TLS option with a URL that is not ``rediss://`` raises
    InvalidArgument (nothing is sent in plain text when TLS was asked for);
    so do files that cannot be loaded. A failed handshake raises
    ConnectionError with the cause (unknown CA, name mismatch, expired
    certificate, client certificate required...).

    A client is thread-safe and meant to be shared by all threads of a
    process. Use it as a context manager, or call close(). Raises
    InvalidArgument for bad URLs or options, and with several URLs
    DuplicateEndpointError or AuthError found while connecting to them.
    """

    _repr_name = "redmutex.Client"

    def __init__(
        self,
        url_or_list: Name | Sequence[Name],
        *,
        watchdog_lease: float = 30.0,
        connect_timeout: float | None = None,
        command_timeout: float | None = None,
        wait_backoff_cap: float | None = None,
        min_replicas: int | None = None,
        replica_timeout: float | None = None,
        retry_count: int | None = None,
        retry_delay: float | None = None,
        shutdown_timeout: float | None = None,
        leave_locks_on_close: bool = False,
        ssl_ca_certs: str | os.PathLike[str] | None = None,
        ssl_certfile: str | os.PathLike[str] | None = None,
        ssl_keyfile: str | os.PathLike[str] | None = None,
        ssl_cert_reqs: str | ssl.VerifyMode | None = None,
        ssl_check_hostname: bool | None = None,
        ssl_server_hostname: str | None = None,
        count_stats: bool = True,
    ) -> None:
        if isinstance(url_or_list, (str, bytes)):
            urls = [url_or_list]
        elif isinstance(url_or_list, (list, tuple)):
            urls = list(url_or_list)
        else:
            raise InvalidArgument(
                f"url_or_list must be a URL or a list of URLs, not {type(url_or_list).__name__}"
            )
        if not urls:
            raise InvalidArgument("at least one server URL is needed")
        encoded = [_to_bytes(u, "server URL", 65536) for u in urls]

        opts = ffi.new("redmutex_client_options *")
        check(lib.redmutex_client_options_init(opts, lib.REDMUTEX_CLIENT_OPTIONS_VERSION))
        opts.watchdog_lease_ms = _to_ms(watchdog_lease, "watchdog_lease", minimum_ms=_WATCHDOG_LEASE_MIN_MS)
        for value, field, what, minimum_ms in (
            (connect_timeout, "connect_timeout_ms", "connect_timeout", 1),
            (command_timeout, "command_timeout_ms", "command_timeout", 1),
            (wait_backoff_cap, "wait_backoff_cap_ms", "wait_backoff_cap", 1),
            (replica_timeout, "replica_timeout_ms", "replica_timeout", 1),
            (retry_delay, "retry_delay_ms", "retry_delay", 0),
            (shutdown_timeout, "shutdown_timeout_ms", "shutdown_timeout", 0),
        ):
            if value is not None:
                setattr(opts, field, _to_ms(value, what, minimum_ms=minimum_ms))
        if min_replicas is not None:
            opts.min_replicas = _to_count(min_replicas, "min_replicas")
        if retry_count is not None:
            opts.retry_count = _to_count(retry_count, "retry_count")
        if leave_locks_on_close:
            opts.flags |= lib.REDMUTEX_CLIENT_LEAVE_LOCKS_ON_FREE
        if not count_stats:
            opts.flags |= lib.REDMUTEX_CLIENT_NO_STATS
        # Log messages go through a queue to the `redmutex` logger (_logging.py).
        opts.log = _logging.log_callback()
        _logging.ensure_thread()
        # The C strings must live until redmutex_client_new returns (it does not keep them).
        tls_strings = _tls_options(
            opts,
            ssl_ca_certs=ssl_ca_certs,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_cert_reqs=ssl_cert_reqs,
            ssl_check_hostname=ssl_check_hostname,
            ssl_server_hostname=ssl_server_hostname,
        )
        c_urls = [ffi.new("char[]", u) for u in encoded]
        url_array = ffi.new("const char *[]", c_urls)
        out = ffi.new("redmutex_client **")
        check(lib.redmutex_client_new(out, url_array, len(c_urls), opts))
        del tls_strings
        self._ptr = out[0]
        self._id = ffi.string(lib.redmutex_client_id(out[0])).decode("ascii")
        self._c = _CClient(self._ptr, self._id)
        self._closed = False
        self._server_count = int(lib.redmutex_client_server_count(out[0]))
        self._retry_count = int(opts.retry_count)
        self._shutdown_timeout = int(opts.shutdown_timeout_ms) / 1000
        # Frees the C client when the Client is garbage (never blocking: the
        # core closes it in the background). At interpreter exit,
        # _close_all_at_exit closes it instead, so its locks are released
        # before the process ends.
        self._finalizer = weakref.finalize(self, _CClient.free, self._c)
        self._finalizer.atexit = False
        # Per-name observers (redmutex.prometheus / redmutex.otel with name_label=):
        # an immutable tuple, so the fast path reads it without a lock.
        self._observers: tuple[_stats.NameObservations, ...] = ()
        self._observers_mu = threading.Lock()
        _live_clients.add(self)

    # -- properties ---------------------------------------------------------

    @property
    def id(self) -> str:
        """The client's id: a random UUID made at creation, the first part of
        the default owner of reentrant locks (Redisson's convention)."""
        return self._id

    @property
    def server_count(self) -> int:
        """How many servers (N) the client uses; N > 1 means Redlock."""
        return self._server_count

    def stats(self) -> dict[str, Any]:
        """What the client has counted since it was made (no I/O, any thread, also after close).

        The metrics of docs/observability.md, from the C core's snapshot::

            {
              "counting": True,             # False with count_stats=False
              "bucket_bounds": [0.0001, ..., 3600.0, inf],   # seconds, every histogram's
              "acquire_wait_seconds": {kind: {outcome: histogram}},
              "hold_seconds": {kind: histogram},
              "locks_held": 0, "waiters": 0,                 # gauges
              "renewals": {"renewed": 0, "failed": 0, "lost": 0},
              "locks_lost": 0,
              "servers": {address: {"reachable": True, "round_trip_seconds": histogram,
                                    "errors": {"timeout": 0, "connection": 0, ...}}},
            }

        kind is lock, rlock, fair, read or write; outcome acquired, timeout,
        interrupted or error; a histogram is ``{"count", "sum" (seconds),
        "buckets" (cumulative counts, one per bound)}``. Server addresses are
        the URLs with the password masked.
        """
        return _stats.snapshot(self._ptr)

    def _add_observer(self, observer: _stats.NameObservations) -> None:
        with self._observers_mu:
            self._observers = (*self._observers, observer)

    def _remove_observer(self, observer: _stats.NameObservations) -> None:
        with self._observers_mu:
            self._observers = tuple(o for o in self._observers if o is not observer)

    def thread_owner(self) -> str:
        """The calling thread's default owner id of reentrant locks,
        ``"<client id>:<OS thread id>"`` (as stored in Redisson's hash field)."""
        self._check_open()
        buf = ffi.new("char[]", lib.REDMUTEX_CLIENT_ID_LEN + 32)
        check(lib.redmutex_client_thread_owner(buf, len(buf), self._ptr))
        return ffi.string(buf).decode("ascii")

    # -- locks ----------------------------------------------------------------

    def lock(
        self,
        name: Name,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        owner: Name | None = None,
        on_lost: Callable[[Lock, LockState], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> Lock:
        """A plain, non-reentrant lock named ``name`` (redis-py Lock wire format).

        See Lock for the arguments. Sends nothing; raises InvalidArgument for
        bad arguments and ClosedError after close().
        """
        return Lock(
            self,
            name,
            lease=lease,
            timeout=timeout,
            fencing=fencing,
            owner=owner,
            on_lost=on_lost,
            max_hold=max_hold,
            max_extensions=max_extensions,
        )

    def rlock(
        self,
        name: Name,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        owner: Name | None = None,
        on_lost: Callable[[Lock, LockState], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> RLock:
        """A reentrant lock named ``name`` (Redisson RLock wire format).

        The default owner is the calling thread. See Lock for the arguments.
        """
        return RLock(
            self,
            name,
            lease=lease,
            timeout=timeout,
            fencing=fencing,
            owner=owner,
            on_lost=on_lost,
            max_hold=max_hold,
            max_extensions=max_extensions,
        )

    def fair_lock(
        self,
        name: Name,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        owner: Name | None = None,
        on_lost: Callable[[Lock, LockState], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> FairLock:
        """A reentrant, fair (FIFO) lock named ``name`` (Redisson RFairLock wire format).

        Waiters get the lock in the order they asked for it, across threads,
        processes and Redisson clients. See FairLock; arguments as for Lock.
        """
        return FairLock(
            self,
            name,
            lease=lease,
            timeout=timeout,
            fencing=fencing,
            owner=owner,
            on_lost=on_lost,
            max_hold=max_hold,
            max_extensions=max_extensions,
        )

    def rwlock(
        self,
        name: Name,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        owner: Name | None = None,
        on_lost: Callable[[Lock, LockState], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> ReadWriteLock:
        """A read-write lock named ``name`` (Redisson RReadWriteLock wire format):
        ``with rw.read:`` for shared access, ``with rw.write:`` for exclusive access.

        See ReadWriteLock; the arguments apply to both sides, as for Lock.
        """
        return ReadWriteLock(
            self,
            name,
            lease=lease,
            timeout=timeout,
            fencing=fencing,
            owner=owner,
            on_lost=on_lost,
            max_hold=max_hold,
            max_extensions=max_extensions,
        )

    def semaphore(
        self,
        name: Name,
        permits: int,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        resize: bool = False,
        on_lost: Callable[[Any, LockState, str], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> Any:
        """A semaphore named ``name`` with ``permits`` permits (Redisson
        RPermitExpirableSemaphore wire format): ``with sem:`` holds one permit
        for the block. See redmutex.Semaphore. Sends nothing."""
        from ._sem import Semaphore

        return Semaphore(
            self,
            name,
            permits,
            lease=lease,
            timeout=timeout,
            fencing=fencing,
            resize=resize,
            on_lost=on_lost,
            max_hold=max_hold,
            max_extensions=max_extensions,
        )

    def latch(self, name: Name) -> Any:
        """A count-down latch named ``name`` (Redisson RCountDownLatch wire
        format). See redmutex.CountDownLatch. Sends nothing."""
        from ._sem import CountDownLatch

        return CountDownLatch(self, name)

    def multi_lock(
        self, locks: Sequence[Lock], *, timeout: float | None = None, owner: Name | None = None
    ) -> Any:
        """All of ``locks`` (lock objects of this client, any kinds) or none,
        with RedissonMultiLock's semantics: ``with client.multi_lock([a, b]):``.
        See redmutex.MultiLock. Sends nothing."""
        from ._sem import MultiLock

        return MultiLock(self, locks, timeout=timeout, owner=owner)

    def synchronized(self, name: Name, *, reentrant: bool = False, **lock_kwargs: Any) -> Callable[[F], F]:
        """Decorator: every call of the function runs under the lock ``name``.

        ``lock_kwargs`` are those of lock() (``timeout=``, ``lease=``, ...);
        with ``timeout`` the call raises LockTimeout when the lock cannot be
        had in time. ``reentrant=True`` uses rlock(), so the function may call
        itself. Each call uses a fresh lock object, so concurrent calls from
        several threads exclude each other. Coroutine functions are refused:
        waiting blocks the thread.
        """
        make = self.rlock if reentrant else self.lock
        make(name, **lock_kwargs)  # validate the arguments now, not at the first call

        def decorator(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                raise TypeError("synchronized() cannot wrap a coroutine function; waiting blocks the thread")

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with make(name, **lock_kwargs):
                    return fn(*args, **kwargs)

            return cast(F, wrapper)

        return decorator

    # -- lifetime -------------------------------------------------------------

    def close(self) -> None:
        """Closes the client: releases the locks still held through it (unless
        ``leave_locks_on_close``), also those of lock objects already garbage
        collected, and stops renewals and background threads, within
        ``shutdown_timeout`` even when servers are unreachable.

        Calls in progress on other threads complete or raise ClosedError; a
        thread waiting in acquire() raises ClosedError at once. Every later
        call on the client or its locks raises ClosedError. Idempotent; may be
        called from an ``on_lost`` callable. The GIL is released meanwhile.
        """
        self._closed = True
        check(lib.redmutex_client_close(self._ptr))
        self._closed_by_other()

    def _closed_by_other(self) -> None:
        """Bookkeeping once the C client was closed (here, or by redmutex.asyncio's worker)."""
        self._closed = True
        self._c.stop_events()
        _live_clients.discard(self)

    def __enter__(self) -> Client:
        """Returns the client itself."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Closes the client (see close())."""
        self.close()


# ---- Lock -----------------------------------------------------------------


class Lock(LockBase[Client]):
    """A plain, non-reentrant distributed lock (redis-py Lock wire format).

    Made by Client.lock(). Arguments:

    * ``lease`` - seconds the lock lives on the server. ``None`` (default):
      the client's ``watchdog_lease``, renewed by the watchdog while held.
      Given: no watchdog; extend it yourself with extend().
    * ``timeout`` - longest wait of ``with lock:`` (None: wait forever). It
      does not change acquire(), which takes its own.
    * ``fencing`` - maintain a fencing token (see ``fence``).
    * ``owner`` - an explicit owner id (str or bytes, unique across
      processes), e.g. for asyncio tasks. For a plain lock it is the token
      stored in the key. Default: the lock object itself, so - like
      threading.Lock - any thread may release what another acquired.
    * ``on_lost`` - ``callable(lock, state)`` called when a held lock turns
      RENEWAL_FAILING or LOST (and HELD again after a recovered renewal
      failure), on the client's event thread ("redmutex-events-..."), never
      on the core's watchdog thread. It may do anything, also drop the last
      reference to the lock or close the client; an exception it raises is
      re-raised by the next call on the lock.
    * ``max_hold`` - the watchdog stops renewing after this many seconds held.
    * ``max_extensions`` - most extensions (watchdog or extend()) per hold.

    Two lock objects with the same name are two independent contenders; share
    one object between threads to use it like a threading.Lock.

    The arguments, the local state and the properties are LockBase's
    (_base.py), shared with redmutex.asyncio; the calls here block.
    """

    _client_class = Client
    _client_what = "redmutex.Client"

    # -- helpers ------------------------------------------------------------

    def _setup(self, handle: Any) -> None:
        # Freeing a handle never blocks and is safe on any thread, in any
        # order with the client; a hold it still has is released by close().
        self._ptr = ffi.gc(handle, lib.redmutex_lock_free)
        # Levels this object holds, per thread (or explicit owner): what
        # _recursion_count() reports; the C core's local state is the truth
        # about whether it holds at all.
        self._levels: collections.defaultdict[object, int] = collections.defaultdict(int)

    def _listen(self) -> None:
        _events.listen(int(lib.redmutex_lock_id(self._ptr)), self)
        self.client._c.pump_events()

    def _run_on_lost(self, state: int, owner: str = "") -> None:
        """Runs on_lost on the client's event thread (_events.py)."""
        del owner  # a lock object has one owner's hold in view
        self._call_on_lost(LockState(state))

    def _observer_owner(self) -> object:
        """Whose hold a per-name observer times: the explicit owner, else the
        lock object (plain) or the calling thread (reentrant kinds)."""
        if self._owner is not None:
            return self._owner
        return None if self._kind == lib.REDMUTEX_KIND_LOCK else threading.get_ident()

    def _acquire_ms(self, wait_ms: int) -> bool:
        if not self.client._observers:  # the usual case: the C core counts by itself
            return self._acquire_c(wait_ms)
        with self._observing(self._observer_owner()) as seen:
            seen.acquired = self._acquire_c(wait_ms)
        return seen.acquired

    def _acquire_c(self, wait_ms: int) -> bool:
        """Acquires within wait_ms (or forever); True, False on timeout, or raises.

        A signal ends the C wait (REDMUTEX_EINTR, nothing held); the pending
        Python handlers run here and what they raise propagates. If they
        return, the wait goes on for the time that is left (PEP 475).

        A signal whose round trip was in flight lets that round trip finish,
        and it may win: the handler's exception is then raised right as the
        C call returns, before this method could hand the lock to anyone (a
        ``with`` whose entry raises never exits). The lock is given back
        before the exception propagates: whatever raises out of acquire()
        leaves nothing held by it.
        """
        deadline = None if wait_ms == _WAIT_FOREVER else time.monotonic() + wait_ms / 1000
        client_ptr = self.client._ptr
        rc_out = ffi.new("int *")
        levels, key = self._levels, self._level_key()
        while True:
            rc_out[0] = 1  # not run
            try:
                interruptible = _signals.interruptible(wait_ms)
                lib.rmpy_acquire(client_ptr, self._ptr, self._c_owner, wait_ms, interruptible, rc_out)
                # No call from here to the return: a pending signal handler
                # runs at calls, and only the one above may see a won lock.
                rc = rc_out[0]
                if rc == 0:
                    levels[key] += 1
                    return True
                if rc == _ETIMEDOUT:
                    return False
                if rc != _EINTR:
                    check(rc)
                _signals.run_pending_handlers()
            except BaseException as exc:
                if rc_out[0] == 0:
                    self._give_back(exc)
                raise
            if deadline is not None:
                wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))

    def _give_back(self, exc: BaseException) -> None:
        """Releases the hold an acquisition just won, as exc propagates instead
        of the acquisition's result; says so on exc when it cannot."""
        rc = lib.redmutex_lock_release(self._ptr, self._c_owner)
        if rc < 0:
            message = ffi.string(lib.redmutex_last_error()).decode("utf-8", "replace")
            _add_note(
                exc,
                f"redmutex: lock {self._name!r} was acquired as this exception came and could not be "
                f"given back ({message}); release it, or it ends with its lease or the client's close()",
            )

    def _level_key(self) -> object:
        """Whose levels _levels counts: the explicit owner, else the calling
        thread (the default owner of the reentrant kinds)."""
        return self._owner if self._owner is not None else threading.get_ident()

    def _is_owned(self) -> bool:
        """Whether this owner (explicit, else: a plain lock's object, a
        reentrant lock's calling thread) holds the lock through this object,
        as known locally (no I/O). threading.Condition asks it."""
        try:
            return self._local_state() in (LockState.HELD, LockState.RENEWAL_FAILING)
        except ClosedError:
            return False

    # -- the threading.Lock interface --------------------------------------

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquires the lock, with threading.Lock.acquire's contract.

        ``blocking=False`` tries once (a timeout other than -1 is then a
        ValueError). Otherwise waits up to ``timeout`` seconds, or forever
        when it is -1 (or None). Returns True when acquired, False when the
        lock could not be had in time; never raises LockTimeout. A timeout
        over a year (redmutex.TIME_MAX) up to threading.TIMEOUT_MAX waits
        forever. Raises InvalidArgument (a ValueError; for a timeout over
        threading.TIMEOUT_MAX also an OverflowError) for bad timeouts, ConnectionError,
        WrongTypeError, LockLostError (this owner's earlier hold through
        this lock object was lost and not released yet: release() it first,
        which reports the loss, then acquire again), ClosedError; a Ctrl-C
        during the wait raises KeyboardInterrupt with nothing held (also when
        the acquisition won just then: it is given back first). The GIL is
        released while waiting.
        """
        wait_ms = _acquire_wait_ms(blocking, timeout)
        self._raise_pending()
        return self._acquire_ms(wait_ms)

    def release(self) -> None:
        """Releases one hold (deleting the lock and waking waiters when it was
        the last). Raises NotOwnedError if not held by this owner (nothing
        changed) and LockLostError if it was held but lost before the release
        (the work done under it was not protected to the end). A stored
        on_lost exception is raised after the release has been done.
        """
        key = self._level_key()
        with self._releasing():
            try:
                rc = lib.redmutex_lock_release(self._ptr, self._c_owner)
                self._observe_release(rc, self._observer_owner())
                check(rc)
            except (LockLostError, NotOwnedError):
                self._levels.pop(key, None)
                raise
            if self._levels[key] > 0:
                self._levels[key] -= 1

    def __enter__(self) -> Lock:
        """Acquires with the lock's ``timeout`` (None: forever); raises LockTimeout."""
        self._raise_pending()
        start = time.monotonic()
        if not self._acquire_ms(self._timeout_ms):
            raise self._timeout_error(start)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Releases. Raises LockLostError if the lease was lost while the block
        ran - unless the block raised, whose exception is never masked (the
        release error is then added to it as a note)."""
        with _exit_release(exc, self._note_exit_failure):
            self.release()

    def locked(self) -> bool:
        """True if anyone holds the lock, as the servers see it now (one round trip)."""
        self._raise_pending()
        out = ffi.new("int *")
        check(lib.redmutex_lock_is_locked(out, self._ptr))
        return bool(out[0])

    def owned(self) -> bool:
        """True if this owner holds the lock, as the servers see it now."""
        self._raise_pending()
        out = ffi.new("int *")
        check(lib.redmutex_lock_is_owned(out, self._ptr, self._c_owner))
        return bool(out[0])

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Adds ``seconds`` to the remaining lease (or, with replace=True, sets
        the lease to it) if this owner still holds the lock; never re-creates a
        lock that is gone. Raises NotOwnedError, LockLostError, LimitError
        (max_extensions reached)."""
        ms = _to_ms(seconds, "seconds", allow_zero=False)
        self._raise_pending()
        mode = lib.REDMUTEX_EXTEND_REPLACE if replace else lib.REDMUTEX_EXTEND_ADD
        check(lib.redmutex_lock_extend(self._ptr, self._c_owner, ms, mode))

    def force_release(self) -> bool:
        """Deletes the lock whoever holds it and wakes waiters (Redisson's
        forceUnlock). Returns True if a lock was deleted. Raises WrongTypeError
        if the key is not a lock of this kind."""
        self._raise_pending()
        out = ffi.new("int *")
        check(lib.redmutex_lock_force_release(out, self._ptr))
        return bool(out[0])

    def inspect(self) -> LockInfo:
        """What the servers hold under this lock's name, whatever kind of lock
        it is (one round trip): held, kind, owner, hold count, TTL, fencing
        counter, a fair lock's queue, a read-write lock's readers. Raises
        WrongTypeError when the key holds something that is no lock."""
        self._raise_pending()
        return _inspect(self._ptr)

    # -- properties -----------------------------------------------------------

    @property
    def ttl(self) -> float | None:
        """Remaining time to live on the servers, in seconds (one round trip).

        None when the lock is not held by anyone, and also when it is held
        without a TTL (a redis-py lock made with timeout=None).
        """
        self._raise_pending()
        out = ffi.new("int64_t *")
        check(lib.redmutex_lock_ttl(out, self._ptr))
        return None if out[0] < 0 else out[0] / 1000

    @property
    def hold_count(self) -> int:
        """This owner's hold count on the servers: the reentrancy depth of an
        rlock (0 when not held); 1 or 0 for a plain lock. One round trip."""
        self._raise_pending()
        out = ffi.new("int64_t *")
        check(lib.redmutex_lock_hold_count(out, self._ptr, self._c_owner))
        return int(out[0])

    def __repr__(self) -> str:
        """threading's form, "<locked redmutex.RLock object name='x' state=HELD at 0x...>":
        locked when this owner holds it, as known locally (no I/O)."""
        kind, (locked, state) = type(self).__name__, self._repr_state()
        return f"<{locked} redmutex.{kind} object name={self._name!r} state={state} at {id(self):#x}>"


class RLock(Lock):
    """A reentrant distributed lock (Redisson RLock wire format).

    Made by Client.rlock(). The default owner is the calling thread
    ("<client id>:<thread id>", as Redisson), so - like threading.RLock - the
    thread that acquired it must release it, once per acquire. ``hold_count``
    is the reentrancy depth. Arguments as for Lock; an explicit ``owner`` is
    the hash field used verbatim.
    """

    _kind = lib.REDMUTEX_KIND_RLOCK

    # -- what threading.Condition uses of an RLock ------------------------------

    def _release_save(self) -> int:
        """Releases every level this owner holds through this object (one round
        trip each) and returns how many, for _acquire_restore(): what
        threading.Condition.wait() does around its wait. NotOwnedError (a
        RuntimeError) when it holds none."""
        if not self._is_owned():
            raise NotOwnedError(
                f"cannot release lock {self._name!r}: this owner does not hold it", NotOwnedError.code
            )
        count = 0
        while self._is_owned():
            self.release()
            count += 1
        return count

    def _acquire_restore(self, count: int) -> None:
        """Takes back the levels _release_save() released, waiting as long as it takes."""
        for _ in range(count):
            self._acquire_ms(_WAIT_FOREVER)

    def _recursion_count(self) -> int:
        """The levels this owner holds through this object (0 when it holds none), as threading.RLock's."""
        return self._levels.get(self._level_key(), 0) if self._is_owned() else 0


class FairLock(RLock):
    """A reentrant, fair (FIFO) distributed lock (Redisson RFairLock wire format).

    Made by Client.fair_lock(). Waiters queue on the server and get the lock
    in the order they asked for it - threads, processes and Redisson's
    RFairLock on the same name alike. A release wakes only the next waiter;
    when the lock is renewed by the watchdog (no ``lease=``) on one server,
    the releasing script hands the lock straight to that waiter, which holds
    it without another round trip.

    A waiter that gives up (timeout, Ctrl-C) leaves the queue. A waiter whose
    process dies is dropped from the queue within 3.5 seconds (a waiting
    acquire refreshes its place every 0.5 s; a place not refreshed for 3 s is
    given up), and a live waiter keeps its place however long it waits.
    Otherwise as RLock: the default owner is the calling thread.
    """

    _kind = lib.REDMUTEX_KIND_FAIR


class ReadLock(RLock):
    """The read side of a ReadWriteLock: shared with other readers, excluded
    by a writer, reentrant per owner. A reader cannot upgrade: acquiring the
    write side while holding the read side waits until its timeout."""

    _kind = lib.REDMUTEX_KIND_READ


class WriteLock(RLock):
    """The write side of a ReadWriteLock: exclusive, reentrant per owner. Its
    owner may take the read side too, and keeps that after releasing the
    write side. An explicit ``owner`` is stored as ``"<owner>:write"``."""

    _kind = lib.REDMUTEX_KIND_WRITE


class ReadWriteLock(ReadWriteBase[Client, ReadLock, WriteLock]):
    """A distributed read-write lock (Redisson RReadWriteLock wire format).

    Made by Client.rwlock(). ``rw.read`` (a ReadLock) and ``rw.write`` (a
    WriteLock) are locks with RLock's interface on the same name::

        rw = client.rwlock("catalog")
        with rw.read:        # any number of readers at once, here and in Redisson
            ...
        with rw.write:       # one writer, no readers
            ...

    Many readers or one writer; both sides are reentrant per owner (the
    calling thread by default); the watchdog renews every read hold's timeout
    key. Not fair: a steady stream of readers can keep a writer waiting.
    """

    _read_class = ReadLock
    _write_class = WriteLock

    def __repr__(self) -> str:
        return f"<redmutex.ReadWriteLock {self.name!r} read={self._read!r} write={self._write!r}>"
