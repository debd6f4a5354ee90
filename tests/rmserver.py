"""The one way every test suite gets a private Redis: a server, a TLS server or a Cluster.

The Python suites (tests/python, tests/cli, tests/chaos) and tests/rmcluster.py
import it:

    s = Server(workdir).start()          # s.url, s.port, s.pid, s.command("PING")
    s = Server(workdir, tls=Tls(certs)).start()
    s.stop()

The bindings' helpers (Ruby, Perl, Tcl, Lua) run it as a program:

    python3 tests/rmserver.py serve [--unix] [--tls CERTDIR [--tls-auth-clients]]
                                    [--cluster MASTERS:REPLICAS] [-- SERVER ARGS...]

which starts the server and prints one line of space-separated key=value pairs,
    url=redis://127.0.0.1:40123 pid=4711 port=40123 tls_port=0 socket= dir=/tmp/... cli=/usr/bin/redis-cli
then keeps it until whoever reads that line closes its end of the pipe (the test
process ended, however it ended), stops it and removes its directory.
`python3 tests/rmserver.py check` prints the server binary, or why there is none.

The rules, which tests/c/harness.c (it forks and execs its servers itself, for
speed) follows too:
  * The binary is $REDMUTEX_TEST_SERVER, else `redis-server` on PATH (Debian's).
    The cluster tool is $REDMUTEX_TEST_CLI, else the "-cli" next to that server
    (valkey-server -> valkey-cli), else redis-cli.
  * Every server reads tests/rmserver.conf, then its own port, directory and log.
  * Free loopback ports only (a port taken between probe and bind is retried);
    never a system Redis, never 6379.
  * A server dies with the process that started it (PR_SET_PDEATHSIG), so a
    suite killed by a timeout leaves none behind.
  * No server binary is a FAILURE, with a message saying what to install; never
    a skip. A suite that skips every test would pass CI while testing nothing.

Needs only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

HERE = Path(__file__).resolve().parent
BASE_CONF = HERE / "rmserver.conf"
MAKE_CERTS = HERE / "tls" / "make_certs.sh"
START_SECONDS = 10.0


class ServerMissing(RuntimeError):
    """No redis-server to test against: the suite fails (see the module's rules)."""


def server_binary() -> str:
    """The absolute path of the server binary the tests run; ServerMissing if there is none."""
    wanted = os.environ.get("REDMUTEX_TEST_SERVER") or "redis-server"
    found = shutil.which(wanted)
    if found:
        return os.path.abspath(found)
    origin = "REDMUTEX_TEST_SERVER" if os.environ.get("REDMUTEX_TEST_SERVER") else "the default"
    raise ServerMissing(
        f"the test server {wanted!r} ({origin}) is not an executable on PATH. "
        "Install Debian's redis-server (apt-get install redis-server, or scripts/deps.sh), "
        "or set REDMUTEX_TEST_SERVER to a redis-server or valkey-server binary. "
        "Tests fail rather than skip without a server (CONTRIBUTING.md, 'Test servers')."
    )


def cli_binary() -> str:
    """The redis-cli that goes with the server binary (used to create clusters)."""
    cli = os.environ.get("REDMUTEX_TEST_CLI")
    if cli:
        return cli
    srv = os.environ.get("REDMUTEX_TEST_SERVER", "")
    if "-server" in srv:
        guess = srv.replace("-server", "-cli")
        if os.access(guess, os.X_OK):
            return guess
    return shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certs(directory: str | os.PathLike[str]) -> Path:
    """The test certificates (tests/tls/make_certs.sh) in directory, which is created."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sh", str(MAKE_CERTS), str(d)], check=True, capture_output=True)
    return d


# ---- a few commands, without a client library -----------------------------------


def _encode(args: Sequence[Any]) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _read(f: Any) -> Any:
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise ConnectionError(f"bad reply {line!r}")


def command(where: int | str, *args: Any, timeout: float = 5.0) -> Any:
    """One command on a fresh connection to 127.0.0.1:where (a port) or the Unix
    socket at where (a path); error replies come back as RuntimeError values."""
    if isinstance(where, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(where)
        except OSError:
            s.close()
            raise
    else:
        s = socket.create_connection(("127.0.0.1", where), timeout=timeout)
    with s:
        s.sendall(_encode(args))
        return _read(s.makefile("rb"))


# ---- servers -----------------------------------------------------------------------


class Tls:
    """TLS for a Server: certificates from a set made by make_certs()."""

    def __init__(
        self,
        certs: str | os.PathLike[str],
        auth_clients: bool = False,
        plain_port: bool = False,
        cert: str = "server.pem",
        key: str = "server.key",
    ) -> None:
        self.certs = Path(certs)
        self.auth_clients = auth_clients  # mutual TLS: clients need a certificate signed by ca.pem
        self.plain_port = plain_port  # also listen in plain text; else TLS only
        self.cert, self.key = cert, key

    def conf(self, tls_port: int) -> str:
        return (
            f"tls-port {tls_port}\ntls-cert-file {self.certs / self.cert}\n"
            f"tls-key-file {self.certs / self.key}\ntls-ca-cert-file {self.certs / 'ca.pem'}\n"
            f"tls-auth-clients {'yes' if self.auth_clients else 'no'}\n"
        )


def _pdeathsig_prefix() -> list[str]:
    """setpriv(1) sets PR_SET_PDEATHSIG and execs the server: the server dies
    with the thread that started it, without Python code running between fork
    and exec (unsafe in a process with threads, as the tests' are)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def die_with_parent() -> None:
    """Child setup (preexec_fn) where setpriv is missing: SIGKILL when the
    parent dies, whatever kills it (PR_SET_PDEATHSIG = 1)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class Server:
    """One redis-server on 127.0.0.1 in workdir (created if needed; servers may share it).

    unix: a Unix socket only, no TCP port (no port to race for).
    tls: a Tls; the server also gets a Unix socket so that command() reaches it.
    conf: extra configuration lines; args: extra command-line arguments (they win).
    env: the server's environment (default: this process's).
    port: a fixed port (0: a free one, chosen again if taken at start).
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        unix: bool = False,
        tls: Tls | None = None,
        conf: str = "",
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int = 0,
    ) -> None:
        self.workdir = str(workdir)
        self.unix, self.tls, self.conf, self.args = unix, tls, conf, list(args)
        self.env = dict(env) if env is not None else None
        self.fixed_port = port
        self.port = port
        self.tls_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._stem = "redis"  # the name of its files: servers may share a directory

    # -- where it is ---------------------------------------------------------------

    @property
    def dir(self) -> str:
        return self.workdir

    @property
    def socket(self) -> str:
        """The Unix socket ('' when the server has none)."""
        return os.path.join(self.workdir, f"{self._stem}.sock") if self.unix or self.tls else ""

    @property
    def logfile(self) -> str:
        return os.path.join(self.workdir, f"{self._stem}.log")

    @property
    def url(self) -> str:
        if self.tls and not self.port:
            return f"rediss://127.0.0.1:{self.tls_port}"
        if self.unix:
            return f"unix://{self.socket}"
        return f"redis://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- life cycle ----------------------------------------------------------------

    def _write_conf(self) -> str:
        lines = [f"include {BASE_CONF}", f"port {self.port}", f"dir {self.workdir}"]
        lines.append(f"logfile {self.logfile}")
        if self.socket:
            lines += [f"unixsocket {self.socket}", "unixsocketperm 700"]
        text = "\n".join(lines) + "\n" + (self.tls.conf(self.tls_port) if self.tls else "") + self.conf + "\n"
        os.makedirs(self.workdir, exist_ok=True)
        path = os.path.join(self.workdir, f"{self._stem}.conf")
        with open(path, "w") as f:
            f.write(text)
        return path

    def _choose_ports(self) -> None:
        if self.fixed_port:
            self.port = self.fixed_port
        elif self.unix or (self.tls and not self.tls.plain_port):
            self.port = 0
        else:
            self.port = free_port()
        if self.tls:
            self.tls_port = free_port()
        self._stem = f"redis-{self.port or self.tls_port}" if (self.port or self.tls_port) else "redis"

    def environment(self) -> Mapping[str, str] | None:
        """The server's environment at each start (None: this process's)."""
        return self.env

    def _spawn(self) -> None:
        binary = server_binary()
        conf = self._write_conf()
        prefix = _pdeathsig_prefix()
        self.proc = subprocess.Popen(
            [*prefix, binary, conf, *self.args],
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=None if prefix else die_with_parent,
        )
        self.paused = False

    def start(self, *args: str) -> Server:
        """Starts the server (extra command-line arguments as in args=) and waits until it answers."""
        self.args += list(args)
        attempts = 1 if self.fixed_port else 5  # a free port may be taken between probe and bind
        for _ in range(attempts):
            self._choose_ports()
            self._spawn()
            if self.wait_ready(START_SECONDS):
                return self
            exited = self.proc is not None and self.proc.poll() is not None
            self.kill()
            if not exited:
                break
        raise RuntimeError(f"{server_binary()} did not start; see {self.logfile}:\n{self._log_tail()}")

    def restart(self) -> Server:
        """Kills the server and starts it again on the same ports and files."""
        self.kill()
        self._spawn()
        if not self.wait_ready(START_SECONDS):
            raise RuntimeError(f"{server_binary()} did not restart; see {self.logfile}:\n{self._log_tail()}")
        return self

    def wait_ready(self, seconds: float) -> bool:
        """Waits until the server answers PING (a LOADING server is not ready); False if it
        exited or the time ran out."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                if self.command("PING", timeout=1.0) == "PONG":
                    return True
            except OSError:
                pass
            time.sleep(0.01)
        return False

    def _log_tail(self) -> str:
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-10:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL (a crash: nothing is saved) and reap."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self.proc = None
        self.paused = False

    def stop(self) -> None:
        self.kill()

    def pause(self) -> None:
        if self.alive and not self.paused:
            self.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            self.paused = True

    def resume(self) -> None:
        if self.alive and self.paused:
            self.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            self.paused = False

    # -- talking to it -------------------------------------------------------------

    def command(self, *args: Any, timeout: float = 5.0) -> Any:
        """One command over the plain port, else the Unix socket."""
        return command(self.port if self.port else self.socket, *args, timeout=timeout)

    def __enter__(self) -> Server:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- the program the bindings run --------------------------------------------------


def _wait_for_reader_to_go() -> None:
    """Returns when nobody reads our stdout any more. The write end of a pipe
    polls POLLERR once its last reader closed it, whether the test process
    closed it, exited or was killed; a terminal polls POLLHUP when it goes."""
    p = select.poll()
    p.register(sys.stdout.fileno(), 0)
    while True:
        for _, ev in p.poll():
            if ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                return


def _serve(opts: argparse.Namespace) -> int:
    from rmcluster import Cluster  # it imports this module

    workdir = tempfile.mkdtemp(prefix="redmutex-server-")
    extra = [a for a in opts.args if a != "--"]
    stoppers: list[Any] = []

    def on_signal(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        if opts.cluster:
            masters, _, replicas = opts.cluster.partition(":")
            cl = Cluster(int(masters), int(replicas or 0), args=extra)
            stoppers.append(cl)
            cl.start()
            first = cl.nodes[0].server
            info = {"url": cl.url, "pid": first.pid, "port": first.port, "tls_port": 0, "socket": ""}
            info["ports"] = ",".join(str(n.port) for n in cl.nodes)
        else:
            tls = Tls(opts.tls, opts.tls_auth_clients, opts.tls_plain_port) if opts.tls else None
            s = Server(workdir, unix=opts.unix, tls=tls, args=extra)
            stoppers.append(s)
            s.start()
            info = {"url": s.url, "pid": s.pid, "port": s.port, "tls_port": s.tls_port, "socket": s.socket}
        info.update(dir=workdir, cli=cli_binary())
        print(" ".join(f"{k}={v}" for k, v in info.items()), flush=True)
        _wait_for_reader_to_go()
        return 0
    except ServerMissing as e:
        print(f"rmserver: {e}", file=sys.stderr)
        return 1
    finally:
        for s in stoppers:
            s.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rmserver.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="print the server binary, or fail saying why there is none")
    sv = sub.add_parser("serve", help="start a server, print where it is, stop it when the reader goes")
    sv.add_argument("--unix", action="store_true", help="a Unix socket only, no TCP port")
    sv.add_argument("--tls", metavar="CERTDIR", help="TLS only, with the certificates of make_certs.sh")
    sv.add_argument("--tls-auth-clients", action="store_true", help="mutual TLS")
    sv.add_argument("--tls-plain-port", action="store_true", help="a plain-text port beside the TLS one")
    sv.add_argument("--cluster", metavar="M:R", help="a Cluster of M masters with R replicas each")
    sv.add_argument("args", nargs=argparse.REMAINDER, help="-- then extra redis-server arguments")
    opts = ap.parse_args(argv)
    if opts.cmd == "check":
        try:
            print(server_binary())
            return 0
        except ServerMissing as e:
            print(f"rmserver: {e}", file=sys.stderr)
            return 1
    return _serve(opts)


if __name__ == "__main__":
    # One copy of the module, whether reached as __main__ or as rmcluster's import.
    sys.path.insert(0, str(HERE))
    import rmserver

    sys.exit(rmserver.main())
