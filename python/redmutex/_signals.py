"""Ctrl-C during a blocking acquire (the Python side of _signals.c).

A blocking acquire runs in C with the GIL released. Before it starts on the
main thread, the signals that have a Python handler get the package's C
handler chained in front (Python reinstalls its own whenever
``signal.signal()`` is called, so this is checked before every wait), and the
wait is registered (one C call). A signal then runs Python's C handler, which only notes
it, and ends the wait through ``redmutex_client_interrupt()``, on whatever
thread the kernel delivered it to. The acquire returns REDMUTEX_EINTR;
run_pending_handlers() runs the Python handlers, and what they raise
(KeyboardInterrupt) ends the acquire, holding nothing. A handler that returns
lets the wait go on (PEP 475).

Only the main thread runs Python signal handlers, so only its waits are
registered; other threads' waits are not ended by signals.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ._redmutex_cffi import lib

_main_thread = threading.main_thread


def begin_wait(client_ptr: Any) -> int:
    """Registers a blocking wait about to start; returns its slot (-1: not registered).

    The C side first chains its handler in front of SIGINT, SIGTERM, SIGHUP,
    SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM wherever they have a handler (that
    is, a Python handler); ignored signals and default actions stay as they are.
    """
    if threading.get_ident() != _main_thread().ident:
        return -1
    return int(lib.rmpy_wait_begin(client_ptr))


def interruptible(wait_ms: int) -> int:
    """1 when a wait of wait_ms on this thread is ended by signals (see begin_wait), else 0."""
    return int(wait_ms != 0 and threading.get_ident() == _main_thread().ident)


def end_wait(slot: int) -> None:
    """Ends the registration made by begin_wait()."""
    if slot >= 0:
        lib.rmpy_wait_end(slot)


def _check_signals_fallback() -> None:
    # Returning to Python code lets the interpreter run pending handlers anyway.
    return None


run_pending_handlers: Callable[[], None] = _check_signals_fallback
try:
    import ctypes

    _PyErr_CheckSignals = ctypes.pythonapi.PyErr_CheckSignals
    _PyErr_CheckSignals.restype = ctypes.c_int
    _PyErr_CheckSignals.argtypes = []

    def _check_signals() -> None:
        """Runs pending Python signal handlers now (main thread); raises what they raise."""
        _PyErr_CheckSignals()

    run_pending_handlers = _check_signals
except (ImportError, AttributeError):  # pragma: no cover - PyPy, no ctypes
    pass
