"""What the blocking and the asyncio lock classes share, written once.

Lock (_client.py) and AsyncLock (_async.py) differ only in how a call
reaches the C core: a blocking call with the GIL released, or a job on the
worker pool that the task awaits. Everything else is here: the checks of a
lock's arguments and the making of its C handle, the exception an
``on_lost`` callable raised kept for the owner's next call, the local state
(no I/O) and the properties built on it, the rules around a release, the
messages, and the read-write pair. Both classes follow one rule, for
instance: every call on a closed client raises ClosedError, also those the C
core would still answer (the local state, validity, fence).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import inspect
import time
from typing import Any, Callable, ClassVar, Generic, Iterator, Protocol, TypeVar, cast

from . import _stats
from ._args import Name, _add_note, _lock_options, _to_bytes, _wait_ms
from ._errors import ClosedError, InvalidArgument, LockLostError, LockTimeout, check
from ._redmutex_cffi import ffi, lib

__all__ = ["ClientBase", "LockBase", "LockInfo", "LockState", "LostNews", "ReadWriteBase"]

_ELOST: int = lib.REDMUTEX_ELOST
_ENOTOWNER: int = lib.REDMUTEX_ENOTOWNER


class LockState(enum.IntEnum):
    """What this process knows locally about its hold of a lock (no I/O)."""

    #: Not held by this owner through this lock object.
    UNLOCKED = lib.REDMUTEX_STATE_UNLOCKED
    #: Held, and the last acquisition or renewal is within its validity.
    HELD = lib.REDMUTEX_STATE_HELD
    #: Renewal is failing (servers unreachable or slow); may still be held
    #: until its validity ends, then it turns LOST.
    RENEWAL_FAILING = lib.REDMUTEX_STATE_RENEWAL_FAILING
    #: Definitely not held any more: the lease ran out or renewal found it gone.
    LOST = lib.REDMUTEX_STATE_LOST


_KIND_NAMES = {
    lib.REDMUTEX_KIND_LOCK: "lock",
    lib.REDMUTEX_KIND_RLOCK: "rlock",
    lib.REDMUTEX_KIND_FAIR: "fair",
    lib.REDMUTEX_KIND_READ: "read",
    lib.REDMUTEX_KIND_WRITE: "write",
}


@dataclasses.dataclass(frozen=True)
class LockInfo:
    """What the servers hold under a lock's name, whatever its kind (Lock.inspect()).

    With several servers (Redlock) ``held`` and ``ttl`` are what a majority
    says, ``owner`` the one a majority agrees on, ``fence`` the highest.
    """

    #: Whether a majority of the servers hold the lock (by anyone, either side of a read-write lock).
    held: bool
    #: What is stored: "lock", "rlock", "fair" (a fair lock with waiters, or read through a
    #: fair_lock() handle), "read" or "write" (a read-write lock's mode); None when nothing is.
    kind: str | None
    #: The holder: the first 8 characters of a plain lock's token (the whole one would let anyone
    #: release it), a Redisson owner field, a read-write lock's writer or first reader; None if unknown.
    owner: str | None
    #: The owner's hold count (1 for a plain lock).
    hold_count: int
    #: Remaining time to live in seconds; None when not held, or held without a TTL.
    ttl: float | None
    #: The fencing counter (the last token issued); None when none was ever issued.
    fence: int | None
    #: Waiters in a fair lock's queue.
    queue_length: int
    #: Owners holding the read side of a read-write lock.
    readers: int
    #: How many servers answered.
    servers_answered: int


def _inspect(ptr: Any) -> LockInfo:
    """redmutex_lock_inspect on a C lock handle (blocks one round trip; the GIL is released)."""
    info = ffi.new("redmutex_lock_info *")
    info.version = lib.REDMUTEX_LOCK_INFO_VERSION
    check(lib.redmutex_lock_inspect(info, ptr))
    owner = ffi.string(info.owner).decode("utf-8", "surrogateescape")
    return LockInfo(
        held=bool(info.held),
        kind=_KIND_NAMES.get(info.kind),
        owner=owner or None,
        hold_count=int(info.hold_count),
        ttl=None if info.ttl_ms < 0 else info.ttl_ms / 1000,
        fence=None if info.fence < 0 else int(info.fence),
        queue_length=int(info.queue_length),
        readers=int(info.readers),
        servers_answered=int(info.servers_answered),
    )


# ---- the clients' common part --------------------------------------------------------


class ClientBase:
    """What redmutex.Client and redmutex.asyncio.AsyncClient share: the closed
    flag, the rule that every call on a closed client raises ClosedError (the
    C core still answers local queries after a close), and the repr."""

    #: The class's name in its repr.
    _repr_name: ClassVar[str]
    _closed: bool

    @property
    def id(self) -> str:
        raise NotImplementedError

    @property
    def server_count(self) -> int:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """True once close() has begun."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the client was closed", ClosedError.code)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{self._repr_name} id={self.id} servers={self.server_count} {state}>"


# ---- the lock classes' common part ---------------------------------------------------


class _ClientLike(Protocol):
    """What a lock uses of its client, redmutex.Client or redmutex.asyncio.AsyncClient."""

    _ptr: Any

    @property
    def closed(self) -> bool: ...

    @property
    def _observers(self) -> tuple[_stats.NameObservations, ...]: ...

    def _check_open(self) -> None: ...


_C = TypeVar("_C", bound=_ClientLike)
_L = TypeVar("_L", bound="LockBase[Any]")
_HELD_STATES = ("HELD", "RENEWAL_FAILING")


def _check_client(client: object, client_class: type, what: str) -> None:
    """Every object of the package is made for an open client of its own API."""
    if not isinstance(client, client_class):
        raise InvalidArgument(f"client must be a {what}")
    cast(_ClientLike, client)._check_open()


@contextlib.contextmanager
def _exit_release(
    exc: BaseException | None, note: Callable[[BaseException, BaseException], None]
) -> Iterator[None]:
    """Around the release that ends a ``with`` block: what it raises goes on
    when the block ended well, and is a note on the block's own exception
    otherwise (that one is never masked)."""
    try:
        yield
    except BaseException as err:
        if exc is None:
            raise
        note(exc, err)


class LostNews:
    """The ``on_lost`` callable of a lock or a semaphore: called with the
    object and the news; what it raises is kept (one at a time) and raised
    by the next call on the object; an awaitable it returns (asyncio) runs
    as a task, whose exception is kept the same way."""

    _on_lost: Callable[..., object] | None
    _pending: collections.deque[BaseException]
    _tasks: set[asyncio.Task[Any]]

    def _init_on_lost(self, on_lost: object) -> None:
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument("on_lost must be callable")
        self._on_lost = on_lost
        # Exceptions raised by on_lost, at most one: appended where the
        # callables run (one at a time), taken by the user's calls.
        self._pending = collections.deque(maxlen=1)
        self._tasks = set()  # on_lost coroutines running (asyncio)

    def _call_on_lost(self, *news: object) -> object:
        """Calls on_lost and returns its result; what it raises is kept, and
        raised by the next call on the object."""
        callback = self._on_lost
        if callback is None:
            return None
        try:
            return callback(self, *news)
        except BaseException as exc:  # noqa: BLE001 - kept for the object's owner
            self._keep(exc)
            return None

    def _run_on_loop(self, result: object) -> None:
        """An awaitable on_lost returned runs as a task on the running loop."""
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._on_lost_done)

    def _on_lost_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._keep(cast(BaseException, task.exception()))

    def _keep(self, exc: BaseException) -> None:
        if not self._pending:
            self._pending.append(exc)

    def _take_pending(self) -> BaseException | None:
        try:
            return self._pending.popleft()
        except IndexError:
            return None

    def _raise_pending(self) -> None:
        exc = self._take_pending()
        if exc is not None:
            raise exc


class _AcquireObservation:
    """Tells a client's per-name observers how one acquire ended (``with``
    around it; ``acquired`` set when it returns)."""

    __slots__ = ("acquired", "lock", "observers", "owner", "start")

    def __init__(self, observers: tuple[_stats.NameObservations, ...], lock: LockBase[Any], owner: object):
        self.observers = observers
        self.lock = lock
        self.owner = owner
        self.acquired = False
        self.start = time.monotonic()

    def __enter__(self) -> _AcquireObservation:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        seconds = time.monotonic() - self.start
        outcome = _stats.outcome_of(exc, self.acquired)
        for observer in self.observers:
            observer.acquired(self.lock, self.owner, self.lock._kind, outcome, seconds)


class LockBase(LostNews, Generic[_C]):
    """A lock object of either API; its subclasses make the calls that need I/O."""

    _kind: int = lib.REDMUTEX_KIND_LOCK
    #: The client class a lock of this API belongs to, and its name in messages.
    _client_class: ClassVar[type]
    _client_what: ClassVar[str]

    _ptr: Any  # the C lock handle

    def __init__(
        self: _L,
        client: _C,
        name: Name,
        *,
        lease: float | None = None,
        timeout: float | None = None,
        fencing: bool = False,
        owner: Name | None = None,
        on_lost: Callable[[_L, LockState], object] | None = None,
        max_hold: float | None = None,
        max_extensions: int | None = None,
    ) -> None:
        _check_client(client, self._client_class, self._client_what)
        self._name = name
        self._c_name = _to_bytes(name, "lock name", lib.REDMUTEX_NAME_MAX)
        self._owner = None if owner is None else _to_bytes(owner, "owner", lib.REDMUTEX_OWNER_MAX)
        # The explicit owner as the C calls take it (NULL: the default owner).
        self._c_owner: Any = ffi.NULL if self._owner is None else self._owner
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        self._init_on_lost(on_lost)
        opts = _lock_options(lease, fencing, max_hold, max_extensions)
        self._fencing = bool(fencing)
        # The client stays alive as long as any of its locks (the C handle
        # keeps the C client alive by itself).
        self.client = client
        out = ffi.new("redmutex_lock **")
        check(lib.redmutex_lock_new(out, client._ptr, self._c_name, self._kind, opts))
        self._setup(out[0])
        if on_lost is not None:
            self._listen()

    # -- what each API does its own way -------------------------------------------

    def _setup(self, handle: Any) -> None:
        """Keeps the new C lock handle (freed when the object is garbage), and
        makes what the API keeps per lock object."""
        raise NotImplementedError

    def _listen(self) -> None:
        """Has the lost-hold news of this lock delivered to its on_lost."""
        raise NotImplementedError

    def _owner_c(self) -> Any:
        """The owner whose hold the local queries report, as the C calls take it."""
        return self._c_owner

    # -- around the calls ---------------------------------------------------------------

    def _observing(self, owner: object) -> _AcquireObservation:
        """Times an acquire for `owner` for the client's per-name observers."""
        return _AcquireObservation(self.client._observers, self, owner)

    @contextlib.contextmanager
    def _releasing(self) -> Iterator[None]:
        """Around a release: an exception on_lost raised before it is raised
        once the release is done - from the LockLostError that reports the
        same loss, if that is how it ended - or kept for the next call when
        the release failed otherwise."""
        pending = self._take_pending()
        try:
            yield
        except LockLostError as lost:
            if pending is not None:
                raise pending from lost
            raise
        except BaseException:
            if pending is not None:
                self._keep(pending)
            raise
        if pending is not None:
            raise pending

    def _observe_release(self, rc: int, owner: object) -> None:
        """Tells the per-name observers that `owner` let go of a hold (released or lost)."""
        observers = self.client._observers
        if observers and rc in (0, _ELOST):
            for observer in observers:
                observer.released(self, owner, self._kind)

    def _timeout_error(self, start: float) -> LockTimeout:
        """The error of a ``with`` whose wait, begun at `start` (time.monotonic()), ran out."""
        waited = round((time.monotonic() - start) * 1000)
        return LockTimeout(
            f"lock {self._name!r} is held by another owner; waited {waited} ms", LockTimeout.code
        )

    def _note_exit_failure(self, exc: BaseException, err: BaseException) -> None:
        """Says on the exception leaving a ``with`` block that the release failed too (err)."""
        _add_note(exc, f"redmutex: releasing lock {self._name!r} on leaving the block also failed: {err!r}")

    # -- the local state (no I/O) --------------------------------------------------------

    def _local_state(self) -> LockState:
        self.client._check_open()
        out = ffi.new("redmutex_state *")
        check(lib.redmutex_lock_state(out, self._ptr, self._owner_c()))
        return LockState(out[0])

    def _repr_state(self) -> tuple[str, str]:
        """ "locked" when the owner holds the lock as known locally, else
        "unlocked", and the state's name (CLOSED, or ? when it cannot be had):
        a repr must not raise, nor take a stored on_lost exception."""
        try:
            state = "CLOSED" if self.client.closed else self._local_state().name
        except Exception:  # noqa: BLE001 - repr must not raise (no task, say)
            state = "?"
        return "locked" if state in _HELD_STATES else "unlocked", state

    @property
    def name(self) -> Name:
        """The lock's name, as given (str or bytes); it is the Redis key."""
        return self._name

    @property
    def owner(self) -> bytes | None:
        """The explicit owner id given at creation (as bytes), or None for the default owner."""
        return self._owner

    @property
    def fencing(self) -> bool:
        """True if the lock maintains fencing tokens."""
        return self._fencing

    @property
    def state(self) -> LockState:
        """This owner's hold as known locally (no I/O)."""
        self._raise_pending()
        return self._local_state()

    @property
    def lost(self) -> bool:
        """True when this owner's hold is known to be lost (state LOST): the lease
        ran out or renewal found the lock gone. Release it to reset."""
        return self.state == LockState.LOST

    @property
    def validity(self) -> float:
        """Seconds this owner's hold is still known to be valid (lease minus time
        since acquisition or renewal minus clock drift); 0.0 when not held."""
        self._raise_pending()
        self.client._check_open()
        out = ffi.new("int64_t *")
        check(lib.redmutex_lock_validity(out, self._ptr, self._owner_c()))
        return max(0, int(out[0])) / 1000

    @property
    def fence(self) -> int | None:
        """The fencing token of this owner's hold (an int that grows with every
        acquisition of this name), or None when fencing is off or not held."""
        self._raise_pending()
        self.client._check_open()
        if not self._fencing:
            return None
        out = ffi.new("int64_t *")
        rc = lib.redmutex_lock_fence(out, self._ptr, self._owner_c())
        if rc == _ENOTOWNER:
            return None
        check(rc)
        return int(out[0])


_R = TypeVar("_R")
_W = TypeVar("_W")


class ReadWriteBase(Generic[_C, _R, _W]):
    """A read-write lock of either API: its two sides on one name."""

    _read_class: Callable[..., _R]
    _write_class: Callable[..., _W]

    def __init__(self, client: _C, name: Name, **lock_kwargs: Any) -> None:
        self._read = self._read_class(client, name, **lock_kwargs)
        self._write = self._write_class(client, name, **lock_kwargs)
        self._name = name

    @property
    def read(self) -> _R:
        """The read side (shared)."""
        return self._read

    @property
    def write(self) -> _W:
        """The write side (exclusive)."""
        return self._write

    @property
    def name(self) -> Name:
        """The lock's name, as given; it is the Redis key of the hash."""
        return self._name
