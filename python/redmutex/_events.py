"""Lost-lock news for ``on_lost`` callables, delivered on a thread of the package.

The C core queues every change of a hold (RENEWAL_FAILING, LOST, back to
HELD) in its client and keeps the client's event fd readable while the queue
is not empty. No Python code runs on the core's watchdog thread: for a client
with at least one lock that has an ``on_lost`` callable, one daemon thread
("redmutex-events") polls that fd, drains the queue and calls the callables.
A callable may do anything, including dropping the last reference to its
lock or closing the client.

The C client pointer outlives the thread: the fd it polls belongs to the
client, so the thread, when it is running, is the one that frees the client
(stop(free_client=True) hands that over); otherwise stop() frees it at once.
Nothing here blocks the caller.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import weakref
from typing import Any, Protocol

from ._errors import check
from ._redmutex_cffi import ffi, lib


class _Listener(Protocol):
    def _run_on_lost(self, state: int, owner: str) -> None: ...


# Locks with an on_lost callable, by their C lock id (never reused).
_listeners: dict[int, weakref.ReferenceType[Any]] = {}


def listen(lock_id: int, lock: _Listener) -> None:
    """Delivers the events of C lock `lock_id` to lock._run_on_lost while `lock` lives."""

    def forget(_ref: weakref.ReferenceType[Any]) -> None:
        _listeners.pop(lock_id, None)

    _listeners[lock_id] = weakref.ref(lock, forget)


class EventPump:
    """The thread that reads one client's event fd (started on first need)."""

    def __init__(self, client_ptr: Any, client_id: str) -> None:
        self._ptr = client_ptr
        self._fd = check(lib.redmutex_client_event_fd(client_ptr))
        self._name = f"redmutex-events-{client_id[:8]}"
        self._mu = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._wake_r = self._wake_w = -1
        self._stopping = False
        self._free_when_done = False

    def ensure_running(self) -> None:
        """Starts the thread if it is not running (also in a forked child)."""
        with self._mu:
            if self._pid != os.getpid():
                # The parent's thread does not exist here; its pipe is the parent's.
                self._pid = os.getpid()
                self._thread = None
            if self._thread is not None or self._stopping:
                return
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, free_client: bool) -> None:
        """Ends the thread after it delivered what is queued. Never blocks.

        With free_client, the C client is freed: by the thread as it ends, or
        here if no thread is running.
        """
        with self._mu:
            self._stopping = True
            self._free_when_done |= free_client
            running = self._thread is not None and self._pid == os.getpid()
            if running:
                with contextlib.suppress(BlockingIOError):  # a wake-up is already pending
                    os.write(self._wake_w, b"x")
        if free_client and not running:
            lib.redmutex_client_free(self._ptr)

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        lock_id = ffi.new("uint64_t *")
        state = ffi.new("redmutex_state *")
        owner = ffi.new("char[]", lib.REDMUTEX_OWNER_MAX + 1)
        while True:
            self._dispatch(lock_id, state, owner)
            with self._mu:
                if self._stopping:
                    break
            for fd, _ in poller.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 512)
        with self._mu:
            self._thread = None
            free = self._free_when_done
            os.close(self._wake_r)
            os.close(self._wake_w)
        if free:
            lib.redmutex_client_free(self._ptr)

    def _dispatch(self, lock_id: Any, state: Any, owner: Any) -> None:
        while lib.redmutex_client_next_event(self._ptr, lock_id, state, owner, len(owner)) == 1:
            ref = _listeners.get(int(lock_id[0]))
            lock = ref() if ref is not None else None
            if lock is not None:
                # The owner whose hold changed: "" for a plain lock's anonymous
                # holder; a semaphore's permit id.
                lock._run_on_lost(int(state[0]), ffi.string(owner).decode("utf-8", "surrogateescape"))
            # Dropped here, on this thread: a finalizer it triggers may run now.
            lock = None
