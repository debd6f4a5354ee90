// The Node.js side of the peer benchmarks, behind the line protocol of
// bench/peers (driver.py documents it), on ioredis. Libraries:
//
//   node-redlock          redlock v5: acquire([name], 30000) / release(), its defaults
//                         (10 retries, 200 ms delay, 100 ms jitter); several URLs: one client each
//   node-redlock:tuned    the same, retrying after 5 ms (5 ms jitter), with no cap on retries
//   sesame-redlock        @sesamecare-oss/redlock (the maintained fork), the same API and defaults
//   sesame-redlock:tuned  likewise tuned
// The hold series uses redlock.using([name], 30000, routine), which extends the lock
// automatically while the routine runs.
import readline from "node:readline";
import { Redis } from "ioredis";
import RedlockV5 from "redlock";
import { Redlock as SesameRedlock } from "@sesamecare-oss/redlock";

const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, ns
const cpuNs = () => {
  const u = process.cpuUsage();
  return BigInt(u.user + u.system) * 1000n;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const clients = new Map();
const client = (url) => {
  if (!clients.has(url)) clients.set(url, new Redis(url));
  return clients.get(url);
};

const redlocks = new Map();
function redlock(lib, urls) {
  const key = lib + " " + urls.join(" ");
  if (!redlocks.has(key)) {
    const [name, variant] = lib.split(":");
    const Cls = name === "node-redlock" ? RedlockV5 : name === "sesame-redlock" ? SesameRedlock : null;
    if (!Cls) throw new Error("unknown library " + lib);
    const settings = variant === "tuned" ? { retryCount: -1, retryDelay: 5, retryJitter: 5 } : {};
    redlocks.set(key, new Cls(urls.map(client), settings));
  }
  return redlocks.get(key);
}

const held = new Map(); // "lib name urls" -> Lock (acquire/release pairs of the wake-up series)

async function pairs(rl, name, seconds) {
  let n = 0;
  const t0 = now(), c0 = cpuNs(), end = t0 + BigInt(Math.round(seconds * 1e9));
  let t = t0;
  while (t < end) {
    for (let i = 0; i < 10; i++) {
      const lock = await rl.acquire([name], 30000);
      await lock.release();
    }
    n += 10;
    t = now();
  }
  return `ok ${n} ${t - t0} ${cpuNs() - c0}`;
}

async function contend(rl, name, start, end, holdUs) {
  const ev = [];
  let failures = 0;
  const wait = Number(start - now()) / 1e6;
  if (wait > 0) await sleep(wait);
  while (now() < end) {
    let lock;
    try {
      lock = await rl.acquire([name], 30000);
    } catch (e) {
      failures++; // ExecutionError: the retries ran out
      continue;
    }
    const got = now();
    await sleep(holdUs / 1000);
    const rel = now();
    await lock.release();
    ev.push(got, rel, now());
  }
  return `ok ${failures}` + (ev.length ? " " + ev.join(" ") : "");
}

const holds = new Map();
async function hold(rl, name, count) {
  const h = { done: null, running: [], cpu0: 0n, lost: 0 };
  const finished = new Promise((r) => (h.done = r));
  let acquired = 0;
  let allIn;
  const allAcquired = new Promise((r) => (allIn = r));
  for (let i = 0; i < count; i++) {
    h.running.push(
      rl
        .using([`${name}:${i}`], 30000, async (signal) => {
          if (++acquired === count) allIn();
          await finished;
          if (signal.aborted) h.lost++;
        })
        .catch(() => h.lost++),
    );
  }
  await allAcquired;
  h.cpu0 = cpuNs();
  holds.set(name, h);
  return "held";
}

async function unhold(name) {
  const h = holds.get(name);
  holds.delete(name);
  const cpu = cpuNs() - h.cpu0;
  h.done();
  await Promise.all(h.running);
  return `ok ${cpu} ${h.lost}`;
}

const rlInput = readline.createInterface({ input: process.stdin });
for await (const line of rlInput) {
  const w = line.trim().split(/\s+/);
  if (!w[0]) continue;
  if (w[0] === "quit") break;
  const [op, lib, name] = w;
  const urls = w.slice(3).filter((t) => t.startsWith("redis://"));
  const args = w.slice(3).filter((t) => !t.startsWith("redis://"));
  const rl = redlock(lib, urls);
  const key = `${lib} ${name} ${urls.join(" ")}`;
  let reply;
  if (op === "pairs") reply = await pairs(rl, name, Number(args[0]));
  else if (op === "contend") reply = await contend(rl, name, BigInt(args[0]), BigInt(args[1]), Number(args[2]));
  else if (op === "acquire") {
    process.stdout.write(`started ${now()}\n`);
    held.set(key, await rl.acquire([name], 30000));
    reply = `ok ${now()}`;
  } else if (op === "release") {
    const t0 = now();
    await held.get(key).release();
    held.delete(key);
    reply = `ok ${t0} ${now()}`;
  } else if (op === "hold") reply = await hold(rl, name, Number(args[0]));
  else if (op === "unhold") reply = await unhold(name);
  else throw new Error("unknown command " + op);
  process.stdout.write(reply + "\n");
}
for (const c of clients.values()) c.disconnect();
