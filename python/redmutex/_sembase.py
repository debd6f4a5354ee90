"""What the blocking and the asyncio semaphores, latches and multi-locks share, written once.

Semaphore (_sem.py) and AsyncSemaphore (_async_sem.py), and likewise the
latches and the multi-locks, differ only in how a call reaches the C core:
a blocking call with the GIL released, or a job on the worker pool that
the task awaits. The checks of their arguments, the making of their C
handles, a semaphore's book of the permits held through it (per thread, or
per task) and the properties built on it, the on_lost news and the messages
are here, so the two APIs cannot drift apart.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, ClassVar, Generic, Sequence, TypeVar

from ._args import Name, _add_note, _hold_options, _to_bytes, _wait_ms
from ._base import _C, LockBase, LockState, LostNews, _check_client
from ._errors import InvalidArgument, LockTimeout, NotOwnedError, check
from ._redmutex_cffi import ffi, lib

_ENOTOWNER: int = lib.REDMUTEX_ENOTOWNER
_PERMIT_ID_SIZE: int = lib.REDMUTEX_PERMIT_ID_SIZE


def _permits(value: object, what: str, maximum: int) -> int:
    """A count of permits: an int from 1 to maximum."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= maximum:
        raise InvalidArgument(f"{what} must be from 1 to {maximum} (got {value!r})")
    return value


def _new_semaphore(
    client_ptr: Any,
    c_name: bytes,
    permits: int,
    lease: float | None,
    fencing: bool,
    resize: bool,
    max_hold: float | None,
    max_extensions: int | None,
) -> Any:
    """A C semaphore handle (not garbage collected) for the keyword arguments
    of Client.semaphore(), checked; raises InvalidArgument for bad ones."""
    _permits(permits, "permits", lib.REDMUTEX_SEMAPHORE_PERMITS_MAX)
    opts = ffi.new("redmutex_semaphore_options *")
    check(lib.redmutex_semaphore_options_init(opts, lib.REDMUTEX_SEMAPHORE_OPTIONS_VERSION))
    _hold_options(opts, lease, max_hold, max_extensions)
    if fencing:
        opts.flags |= lib.REDMUTEX_SEMAPHORE_FENCING
    if resize:
        opts.flags |= lib.REDMUTEX_SEMAPHORE_RESIZE
    out = ffi.new("redmutex_semaphore **")
    check(lib.redmutex_semaphore_new(out, client_ptr, c_name, permits, opts))
    return out[0]


class SemaphoreBase(LostNews, Generic[_C]):
    """A semaphore of either API; its subclasses make the calls that need I/O."""

    #: The client class a semaphore of this API belongs to, its name in
    #: messages, and the semaphore's in its repr.
    _client_class: ClassVar[type]
    _client_what: ClassVar[str]
    _repr_name: ClassVar[str]

    _ptr: Any  # the C semaphore handle

    def __init__(
        self,
        client: _C,
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
    ) -> None:
        _check_client(client, self._client_class, self._client_what)
        self._name = name
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        self._init_on_lost(on_lost)
        self._c_name = _to_bytes(name, "semaphore name", lib.REDMUTEX_NAME_MAX)
        self._permits = permits
        self._fencing = bool(fencing)
        self.client = client
        # Permit ids held through this object: per acquirer (thread or task,
        # newest last), and all of them in acquisition order. The mutex is
        # for the blocking API's threads; uncontended on a loop.
        self._mu = threading.Lock()
        self._by_caller: dict[object, list[bytes]] = {}
        self._order: list[bytes] = []
        c_options = (lease, fencing, resize, max_hold, max_extensions)
        self._setup(_new_semaphore(client._ptr, self._c_name, permits, *c_options))
        if on_lost is not None:
            self._listen()

    # -- what each API does its own way -------------------------------------------

    def _setup(self, handle: Any) -> None:
        """Keeps the new C handle (freed when the object is garbage)."""
        raise NotImplementedError

    def _listen(self) -> None:
        """Has the lost-hold news of this semaphore's permits delivered to its on_lost."""
        raise NotImplementedError

    def _caller(self) -> object:
        """Whose permits are "the caller's": the calling thread, or task."""
        raise NotImplementedError

    # -- the permits held through this object ---------------------------------------

    def _push(self, permit: bytes) -> None:
        with self._mu:
            self._by_caller.setdefault(self._caller(), []).append(permit)
            self._order.append(permit)

    def _forget(self, permit: bytes) -> None:
        with self._mu:
            if permit in self._order:
                self._order.remove(permit)
            for caller, stack in list(self._by_caller.items()):
                if permit in stack:
                    stack.remove(permit)
                    if not stack:
                        del self._by_caller[caller]

    def _latest(self) -> bytes | None:
        """The caller's most recent permit, else the most recent of anyone's."""
        with self._mu:
            stack = self._by_caller.get(self._caller())
            if stack:
                return stack[-1]
            return self._order[-1] if self._order else None

    def _block_permit(self) -> bytes | None:
        """The permit a ``with`` block of the caller took (its most recent)."""
        with self._mu:
            stack = self._by_caller.get(self._caller())
            return stack[-1] if stack else None

    def _permit_arg(self, permit_id: Name | None) -> bytes:
        """The permit a release or an extension acts on: permit_id, or the caller's latest."""
        if permit_id is None:
            permit = self._latest()
            if permit is None:
                raise NotOwnedError(
                    f"semaphore {self._name!r}: no permit is held through this object", NotOwnedError.code
                )
            return permit
        return _to_bytes(permit_id, "permit_id", _PERMIT_ID_SIZE - 1)

    def _count_arg(self, permits: object) -> int:
        """The permits of one acquisition: from 1 to the capacity (and the core's most)."""
        return _permits(permits, "permits", min(self._permits, lib.REDMUTEX_ACQUIRE_PERMITS_MAX))

    def _timeout_error(self, start: float) -> LockTimeout:
        waited = round((time.monotonic() - start) * 1000)
        return LockTimeout(f"semaphore {self._name!r}: no permit free; waited {waited} ms", LockTimeout.code)

    def _note_exit_failure(self, exc: BaseException, err: BaseException) -> None:
        _add_note(
            exc, f"redmutex: releasing a permit of {self._name!r} on leaving the block also failed: {err!r}"
        )

    # -- local state (no I/O) -------------------------------------------------------

    @property
    def name(self) -> Name:
        """The semaphore's name, as given; it is the Redis key of its counter."""
        return self._name

    @property
    def permits(self) -> int:
        """The capacity this semaphore was made with."""
        return self._permits

    @property
    def permit_id(self) -> str | None:
        """The id of the caller's most recent permit (anyone's, if it has none), or None."""
        permit = self._latest()
        return None if permit is None else permit.decode("ascii")

    @property
    def held(self) -> list[str]:
        """The ids of the permits held through this object, oldest first."""
        with self._mu:
            return [p.decode("ascii") for p in self._order]

    @property
    def state(self) -> LockState:
        """The state of ``permit_id``'s permit (UNLOCKED when none is held)."""
        self._raise_pending()
        self.client._check_open()
        permit = self._latest()
        if permit is None:
            return LockState.UNLOCKED
        out = ffi.new("redmutex_state *")
        check(lib.redmutex_semaphore_state(out, self._ptr, permit))
        return LockState(out[0])

    @property
    def lost(self) -> bool:
        """True when ``permit_id``'s permit is known to be lost (release it to forget it)."""
        return self.state == LockState.LOST

    @property
    def validity(self) -> float:
        """Seconds ``permit_id``'s permit is still known to be valid; 0.0 when none is held."""
        permit = self._latest()
        if permit is None:
            return 0.0
        out = ffi.new("int64_t *")
        check(lib.redmutex_semaphore_validity(out, self._ptr, permit))
        return max(0, int(out[0])) / 1000

    @property
    def fence(self) -> int | None:
        """The fencing token of ``permit_id``'s permit, or None (fencing off, or none held)."""
        permit = self._latest()
        if not self._fencing or permit is None:
            return None
        out = ffi.new("int64_t *")
        rc = lib.redmutex_semaphore_fence(out, self._ptr, permit)
        if rc == _ENOTOWNER:
            return None
        check(rc)
        return int(out[0])

    def __repr__(self) -> str:
        with self._mu:
            held = len(self._order)
        name, permits = self._name, self._permits
        return f"<{self._repr_name} name={name!r} permits={permits} held={held} at {id(self):#x}>"


class LatchBase(Generic[_C]):
    """A count-down latch of either API; its subclasses make the calls."""

    _client_class: ClassVar[type]
    _client_what: ClassVar[str]
    _repr_name: ClassVar[str]

    _ptr: Any  # the C latch handle

    def __init__(self, client: _C, name: Name) -> None:
        _check_client(client, self._client_class, self._client_what)
        self._name = name
        self._c_name = _to_bytes(name, "latch name", lib.REDMUTEX_NAME_MAX)
        self.client = client
        out = ffi.new("redmutex_latch **")
        check(lib.redmutex_latch_new(out, client._ptr, self._c_name))
        self._setup(out[0])

    def _setup(self, handle: Any) -> None:
        """Keeps the new C handle (freed when the object is garbage)."""
        raise NotImplementedError

    @staticmethod
    def _count_arg(count: object) -> int:
        """The count try_set_count() sets: an int >= 1."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > 2**62:
            raise InvalidArgument(f"count must be an int >= 1, not {count!r}")
        return count

    @property
    def name(self) -> Name:
        """The latch's name, as given; it is the Redis key of its count."""
        return self._name

    def __repr__(self) -> str:
        return f"<{self._repr_name} name={self._name!r} at {id(self):#x}>"


_K = TypeVar("_K", bound="LockBase[Any]")


class MultiLockBase(Generic[_C, _K]):
    """A multi-lock of either API; its subclasses make the calls."""

    _client_class: ClassVar[type]
    _client_what: ClassVar[str]
    _repr_name: ClassVar[str]
    #: The lock class of this API, whose objects a multi-lock takes.
    _lock_class: ClassVar[type]

    _ptr: Any  # the C multi-lock handle

    def __init__(
        self, client: _C, locks: Sequence[_K], *, timeout: float | None = None, owner: Name | None = None
    ) -> None:
        _check_client(client, self._client_class, self._client_what)
        if isinstance(locks, (str, bytes)) or not isinstance(locks, Sequence) or not locks:
            raise InvalidArgument("multi_lock() takes a non-empty list of lock objects")
        for lock in locks:
            if not isinstance(lock, self._lock_class):
                raise InvalidArgument(f"multi_lock() takes lock objects, not {type(lock).__name__}")
            if lock.client is not client:
                raise InvalidArgument("the locks of a multi-lock must belong to its client")
        # The explicit owner: given, or the one the locks share (None: each
        # lock's default owner, or the calling task's in asyncio).
        self._owner: bytes | None
        if owner is not None:
            self._owner = _to_bytes(owner, "owner", lib.REDMUTEX_OWNER_MAX)
        else:
            owners = {lock._owner for lock in locks}
            if len(owners) > 1:
                raise InvalidArgument("the locks of a multi-lock have different owners; pass owner=")
            self._owner = owners.pop()
        self._timeout_ms = _wait_ms(timeout)
        self.timeout = timeout
        self.client = client
        self._locks = list(locks)
        array = ffi.new("redmutex_lock *[]", [lock._ptr for lock in self._locks])
        out = ffi.new("redmutex_multi_lock **")
        check(lib.redmutex_multi_lock_new(out, array, len(self._locks)))
        self._setup(out[0])

    def _setup(self, handle: Any) -> None:
        """Keeps the new C handle (freed when the object is garbage)."""
        raise NotImplementedError

    @property
    def locks(self) -> list[_K]:
        """The lock objects of the set, as given."""
        return list(self._locks)

    def _note_exit_failure(self, exc: BaseException, err: BaseException) -> None:
        _add_note(exc, f"redmutex: releasing the multi-lock on leaving the block also failed: {err!r}")

    def __repr__(self) -> str:
        names = [lock.name for lock in self._locks]
        return f"<{self._repr_name} locks={names!r} at {id(self):#x}>"
