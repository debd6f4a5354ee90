"""The core's log messages on the ``redmutex`` logger (the Python side of _log.c).

Every client the package makes passes the C callback of _log.c as its
``log`` option: it queues the message (renewal failing, lock lost, server
unreachable, and their recoveries) without touching Python, so neither the
core's watchdog thread nor a caller's thread inside a C call ever waits for
the GIL or a logging handler. One daemon thread per process
("redmutex-log", started with the first client) reads the queue and logs
each message on ``logging.getLogger("redmutex")``: WARNING for trouble,
INFO for recoveries, with ``extra`` fields ``redmutex_lock`` and
``redmutex_server`` (None when the message has none). Nothing is logged on
the fast path: a message is written only when something changes.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import Any

from ._redmutex_cffi import ffi, lib

logger = logging.getLogger("redmutex")

_mu = threading.Lock()  # replaced in a forked child: the parent's may be held
_thread: threading.Thread | None = None
_pid = -1


def log_callback() -> Any:
    """The C function pointer for the client option ``log``."""
    return ffi.addressof(lib, "rmpy_log")


def ensure_thread() -> None:
    """Starts the thread that hands queued messages to the logger (also in a forked child)."""
    global _thread, _pid
    with _mu:
        if _thread is not None and _pid == os.getpid():
            return
        fd = lib.rmpy_log_fd()
        if fd < 0:
            return  # no eventfd: messages stay queued (and are dropped once it is full)
        _pid = os.getpid()
        _thread = threading.Thread(target=_run, args=(fd,), name="redmutex-log", daemon=True)
        _thread.start()


def _after_fork_in_child() -> None:
    """A forked child has no thread of its parent's: it gets its own if the parent had one."""
    global _thread, _mu
    _mu = threading.Lock()
    if _thread is not None:
        _thread = None
        ensure_thread()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _run(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    record = ffi.new("rmpy_log_record *")
    while True:
        while lib.rmpy_log_next(record):
            emit(record)
        poller.poll()


def emit(record: Any) -> None:
    lock = ffi.string(record.lock).decode("utf-8", "replace") or None
    server = ffi.string(record.server).decode("utf-8", "replace") or None
    message = ffi.string(record.message).decode("utf-8", "replace")
    logger.log(int(record.level), "%s", message, extra={"redmutex_lock": lock, "redmutex_server": server})
