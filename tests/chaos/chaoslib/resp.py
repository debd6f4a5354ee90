"""A minimal RESP2 client for the harness and the Python driver.

The harness talks to its servers directly (never through redmutex) to set
faults up and to inspect what is left; the standard library is enough, so the
harness runs on a bare Python.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any


class RespError(Exception):
    """An error reply (-ERR ...)."""


class Resp:
    """One blocking connection. Not thread-safe; make one per thread."""

    def __init__(self, host: str, port: int, timeout: float = 2.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(*args: Any) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def send(self, *args: Any) -> None:
        self.sock.sendall(self.encode(*args))

    def call(self, *args: Any) -> Any:
        self.send(*args)
        return self.read()

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.sock.sendall(b"".join(self.encode(*c) for c in commands))
        out = []
        for _ in commands:
            try:
                out.append(self.read())
            except RespError as e:
                out.append(e)
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the server")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def read(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ConnectionError(f"bad RESP line {line[:40]!r}")


def text(value: Any) -> str:
    """A bulk reply as str (None stays None)."""
    return value.decode() if isinstance(value, bytes) else value
