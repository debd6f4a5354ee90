"""The fault proxy: a user-space TCP proxy with one listener per backend.

This kernel has no `tc netem`, so delay, loss, blackholes, mid-reply closes and
late delivery are made here, per backend, under the harness's control:

* ``delay_ms`` ± ``jitter_ms`` on every reply chunk (order kept per connection);
* ``drop``: per request chunk, the probability that the connection dies
  with it - half the time before the request is forwarded (lost request),
  half the time after, instead of its reply (lost reply). TCP never loses
  bytes inside a live connection, so a "drop" is always a dead connection;
* ``close_mid_reply``: per reply chunk, the probability of forwarding only a
  part of it and closing;
* ``blackhole``: nothing moves and nothing is refused (a partition without
  RST); what was sent meanwhile is delivered when it is lifted, like TCP
  retransmissions after a heal;
* ``refuse``: new connections are closed at once and live ones are cut (a
  server that is down);
* ``hold``: the next request chunk containing a byte string is delivered
  ``delay_ms`` late while every other connection flows (later requests on
  the same connection queue behind it, as TCP orders them);
* ``mask_run_id``: INFO replies report a fixed run_id for the backend, so a
  restart behind the proxy is invisible to clients (the "without the run_id
  check" mode of S7).

Run as ``python3 -m chaoslib.proxy --control SOCK --log FILE --seed N``; the
harness talks JSON lines over the Unix socket (ProxyControl below).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_ID = re.compile(rb"run_id:([0-9a-f]{40})")


@dataclass
class Backend:
    name: str
    upstream: int
    port: int = 0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    drop: float = 0.0
    close_mid_reply: float = 0.0
    blackhole: bool = False
    refuse: bool = False
    mask_run_id: bool = False
    hold_match: bytes | None = None
    hold_ms: float = 0.0
    healed: asyncio.Event = field(default_factory=asyncio.Event)
    conns: set[Conn] = field(default_factory=set)
    stats: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def fake_run_id(self) -> bytes:
        return hashlib.sha1(b"chaos-proxy:" + self.name.encode()).hexdigest().encode()


class Proxy:
    def __init__(self, seed: int, log_path: Path) -> None:
        self.rng = random.Random(seed)
        self.backends: dict[str, Backend] = {}
        self.servers: dict[str, asyncio.base_events.Server] = {}
        self.log = open(log_path, "a", buffering=1)  # noqa: SIM115 - the proxy's lifetime

    def event(self, ev: str, **fields: Any) -> None:
        self.log.write(json.dumps({"t": time.monotonic_ns(), "p": "proxy", "ev": ev, **fields}) + "\n")

    async def add(self, name: str, upstream: int) -> int:
        b = Backend(name, upstream)
        b.healed.set()
        self.backends[name] = b
        server = await asyncio.start_server(lambda r, w: self.accept(b, r, w), "127.0.0.1", 0)
        self.servers[name] = server
        b.port = server.sockets[0].getsockname()[1]
        return b.port

    async def accept(self, b: Backend, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if b.refuse:
            b.count("refused")
            writer.transport.abort()
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", b.upstream), 2.0)
        except (OSError, asyncio.TimeoutError):
            b.count("upstream_down")
            writer.transport.abort()
            return
        for w in (writer, up_w):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(self, b, reader, writer, up_r, up_w)
        b.conns.add(conn)
        await conn.run()
        b.conns.discard(conn)

    def configure(self, name: str, settings: dict[str, Any]) -> None:
        for b in self.targets(name):
            for key, value in settings.items():
                if key == "hold_match":
                    b.hold_match = value.encode() if value else None
                elif hasattr(b, key) and key not in ("name", "port", "conns", "stats", "healed"):
                    setattr(b, key, value)
            if b.blackhole:
                b.healed.clear()
            else:
                b.healed.set()
            if b.refuse:
                for c in list(b.conns):
                    c.abort("refuse")

    def targets(self, name: str) -> list[Backend]:
        return list(self.backends.values()) if name == "*" else [self.backends[name]]

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "add":
            return {"port": await self.add(req["name"], int(req["upstream"]))}
        if op == "set":
            self.configure(req["name"], req.get("settings", {}))
            return {"ok": True}
        if op == "hold":
            self.configure(req["name"], {"hold_match": req["match"], "hold_ms": float(req["delay_ms"])})
            return {"ok": True}
        if op == "reset":
            plain = {
                "delay_ms": 0.0,
                "jitter_ms": 0.0,
                "drop": 0.0,
                "close_mid_reply": 0.0,
                "blackhole": False,
                "refuse": False,
                "hold_match": None,
            }
            self.configure(req.get("name", "*"), plain)
            return {"ok": True}
        if op == "retarget":
            for b in self.targets(req["name"]):
                b.upstream = int(req["upstream"])
                for c in list(b.conns):
                    c.abort("retarget")
            return {"ok": True}
        if op == "kill_conns":
            for b in self.targets(req["name"]):
                for c in list(b.conns):
                    c.abort("killed")
            return {"ok": True}
        if op == "stats":
            return {
                n: {"stats": b.stats, "conns": len(b.conns), "pending": sum(c.pending() for c in b.conns)}
                for n, b in self.backends.items()
            }
        return {"error": f"unknown op {op!r}"}


class Conn:
    """One client connection and its upstream twin: two readers, two ordered writers."""

    def __init__(
        self,
        proxy: Proxy,
        b: Backend,
        cr: asyncio.StreamReader,
        cw: asyncio.StreamWriter,
        ur: asyncio.StreamReader,
        uw: asyncio.StreamWriter,
    ) -> None:
        self.proxy, self.b = proxy, b
        self.cr, self.cw, self.ur, self.uw = cr, cw, ur, uw
        self.to_server: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self.to_client: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self.last_up = 0.0
        self.last_down = 0.0
        self.drop_next_reply = False
        self.closed = False
        self.carry = b""  # an INFO reply cut inside "run_id:..." waits for its end

    def pending(self) -> int:
        return self.to_server.qsize() + self.to_client.qsize()

    def abort(self, why: str) -> None:
        if not self.closed:
            self.closed = True
            self.b.count(why)
            self.cw.transport.abort()
            self.uw.transport.abort()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.read_requests()),
            asyncio.create_task(self.read_replies()),
            asyncio.create_task(self.write(self.to_server, self.uw)),
            asyncio.create_task(self.write(self.to_client, self.cw)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        # Let queued bytes go out (a late request is still delivered late) before closing.
        while not self.closed and self.pending() and not self.b.refuse:
            await asyncio.sleep(0.005)
        self.abort("closed")
        for t in tasks:
            t.cancel()

    async def write(self, q: asyncio.Queue[tuple[float, bytes]], w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            at, data = await q.get()
            await self.b.healed.wait()
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                await self.b.healed.wait()
            if data == b"":
                self.abort("mid_reply")
                return
            w.write(data)
            await w.drain()
            q.task_done()

    async def read_requests(self) -> None:
        loop = asyncio.get_running_loop()
        b, rng = self.b, self.proxy.rng
        while True:
            data = await self.cr.read(65536)
            if not data:
                return
            if b.drop > 0 and rng.random() < b.drop:
                if rng.random() < 0.5:
                    self.proxy.event("drop", backend=b.name, what="request")
                    self.abort("drop_request")
                    return
                self.drop_next_reply = True
            at = max(loop.time(), self.last_up)
            if b.hold_match is not None and b.hold_match in data:
                at += b.hold_ms / 1000
                self.proxy.event("hold", backend=b.name, delay_ms=b.hold_ms, bytes=len(data))
                b.count("held")
                b.hold_match = None
            self.last_up = at
            self.to_server.put_nowait((at, data))

    async def read_replies(self) -> None:
        loop = asyncio.get_running_loop()
        b, rng = self.b, self.proxy.rng
        while True:
            data = await self.ur.read(65536)
            if not data:
                return
            if self.drop_next_reply:
                self.proxy.event("drop", backend=b.name, what="reply")
                self.abort("drop_reply")
                return
            if b.mask_run_id:
                data = self.mask(data)
                if not data:
                    continue
            delay = b.delay_ms + (rng.uniform(-b.jitter_ms, b.jitter_ms) if b.jitter_ms else 0.0)
            at = max(loop.time() + max(delay, 0.0) / 1000, self.last_down)
            self.last_down = at
            if b.close_mid_reply > 0 and len(data) > 1 and rng.random() < b.close_mid_reply:
                cut = rng.randint(1, len(data) - 1)
                self.proxy.event("close_mid_reply", backend=b.name, sent=cut, of=len(data))
                self.to_client.put_nowait((at, data[:cut]))
                self.to_client.put_nowait((at, b""))
                return
            self.to_client.put_nowait((at, data))

    def mask(self, data: bytes) -> bytes:
        data = RUN_ID.sub(b"run_id:" + self.b.fake_run_id(), self.carry + data)
        self.carry = b""
        # A chunk may end inside "run_id:<40 hex>": keep that tail for the next one.
        # (A whole RESP reply ends in CRLF, so only a cut reply is ever held back.)
        cut = data.rfind(b"run_id:")
        if cut < 0 or len(data) - cut >= 47:
            cut = next((len(data) - k for k in range(6, 0, -1) if data.endswith(b"run_id:"[:k])), -1)
        if cut >= 0:
            self.carry, data = data[cut:], data[:cut]
        return data


async def serve(control: Path, seed: int, log_path: Path) -> None:
    proxy = Proxy(seed, log_path)

    async def on_control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            try:
                reply = await proxy.handle(json.loads(line))
            except Exception as e:  # noqa: BLE001 - reported to the harness, the proxy lives on
                reply = {"error": repr(e)}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(on_control, str(control))
    async with server:
        await server.serve_forever()


class ProxyControl:
    """The harness's handle on a proxy process."""

    def __init__(self, workdir: Path, seed: int) -> None:
        self.control = workdir / "proxy.sock"
        self.log_path = workdir / "proxy.jsonl"
        if self.control.exists():
            self.control.unlink()
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        from .servers import _die_with_parent

        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chaoslib.proxy",
                "--control",
                str(self.control),
                "--seed",
                str(seed),
                "--log",
                str(self.log_path),
            ],
            env=env,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        while not self.control.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the fault proxy did not start")
            time.sleep(0.01)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(self.control))
        self.file = self.sock.makefile("rwb")
        self.mu = threading.Lock()
        self.ports: dict[str, int] = {}

    def request(self, **req: Any) -> dict[str, Any]:
        with self.mu:
            self.file.write(json.dumps(req).encode() + b"\n")
            self.file.flush()
            reply = json.loads(self.file.readline())
        if "error" in reply:
            raise RuntimeError(f"proxy: {reply['error']}")
        return reply

    def add(self, name: str, upstream: int) -> int:
        port = int(self.request(op="add", name=name, upstream=upstream)["port"])
        self.ports[name] = port
        return port

    def url(self, name: str) -> str:
        return f"redis://127.0.0.1:{self.ports[name]}"

    def set(self, name: str, **settings: Any) -> None:
        self.request(op="set", name=name, settings=settings)

    def hold(self, name: str, match: str, delay_ms: float) -> None:
        self.request(op="hold", name=name, match=match, delay_ms=delay_ms)

    def reset(self, name: str = "*") -> None:
        self.request(op="reset", name=name)

    def retarget(self, name: str, upstream: int) -> None:
        self.request(op="retarget", name=name, upstream=upstream)

    def kill_conns(self, name: str = "*") -> None:
        self.request(op="kill_conns", name=name)

    def stats(self) -> dict[str, Any]:
        return self.request(op="stats")

    def wait_drained(self, timeout: float) -> bool:
        """Until no byte is queued in the proxy (late deliveries done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(v["pending"] == 0 for v in self.stats().values()):
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", required=True, type=Path)
    args = ap.parse_args()
    asyncio.run(serve(args.control, args.seed, args.log))


if __name__ == "__main__":
    main()
