#!/usr/bin/env python3
"""Checks the shape of core/src that docs/architecture.md describes.

- Layers: a function defined in one file calls only functions of its own
  layer or of the layers below it. The only calls up are the reference
  counts (whoever drops the last reference destroys).
- Sizes: no file over 610 lines, no function over 80 lines.
- Errors: internal functions fill the rm_err they are given; only a public
  entry point (a function named redmutex_*) hands it to the caller's thread
  (rm_publish), a public entry point that fills one publishes it, and
  nothing below reads the thread's last error back.

Reads the C files as text (a function is a line that starts a definition at
column 0 up to the closing brace at column 0), which is how core/src is
written. Exits 1 and lists what breaks the rules.
"""
import glob
import os
import re
import sys

LAYERS = [
    ["util.c", "error.c", "options.c", "stats.c", "retry.c"],
    ["redact.c", "url.c", "sentinel_url.c", "resp.c", "scripts.c", "slots.c", "topology.c"],
    ["conn.c", "tls.c"],
    ["pool.c", "deploy.c", "sentinel.c", "sentinel_watch.c"],
    ["fanout.c", "slot.c", "redirect.c", "failover.c"],
    ["quorum.c", "tally.c"],
    ["kind.c", "kind_plain.c", "kind_rlock.c", "kind_fair.c", "kind_rw.c", "kind_sem.c"],
    ["handle.c", "owner.c", "holds.c", "watchdog.c", "renew.c", "events.c", "unsettled.c"],
    ["subscriber.c", "shard.c"],
    ["interrupt.c", "waiter.c"],
    ["request.c", "attempt.c", "acquire.c", "release.c", "extend.c", "query.c"],
    ["pollwait.c", "waitready.c", "waitfd.c"],
    ["lifetime.c", "client.c"],
    ["semaphore.c", "latch.c", "multilock.c", "multiattempt.c"],
]
# Dropping the last reference destroys the object, whoever drops it.
UP_CALLS_ALLOWED = {"rm_client_unref", "rm_lock_unref_locked", "rm_orphans_drop_locked"}
MAX_FILE_LINES = 610
MAX_FUNCTION_LINES = 80


def strip(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def functions(text):
    """(name, first line, line count) of each function defined at column 0."""
    out, name, start = [], None, None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if start is None:
            m = re.match(r"^[A-Za-z_][\w\s\*]*?\b(\w+)\s*\(", line)
            if m and not line.rstrip().endswith(";") and not line.startswith(("typedef", "#")):
                name, first = m.group(1), i
            elif line == "{" and name:
                start = first
            elif line.startswith("{") is False and line.rstrip().endswith(";"):
                name = None
        elif line == "}":
            out.append((name, start + 1, i - start + 1))
            name, start = None, None
    return out


def main():
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "core", "src")
    layer = {f: n for n, files in enumerate(LAYERS) for f in files}
    texts = {os.path.basename(p): open(p).read() for p in glob.glob(os.path.join(src, "*.c"))}
    problems = [f"{f}: not in any layer (scripts/check-layers.py)" for f in texts if f not in layer]
    defined = {}
    for f, text in texts.items():
        for name, _, _ in functions(strip(text)):
            defined.setdefault(name, f)
    for f, text in sorted(texts.items()):
        body = strip(text)
        n_lines = text.count("\n")
        if n_lines > MAX_FILE_LINES:
            problems.append(f"{f}: {n_lines} lines (at most {MAX_FILE_LINES})")
        for name, first, count in functions(body):
            if count > MAX_FUNCTION_LINES:
                problems.append(f"{f}:{first}: {name} is {count} lines (at most {MAX_FUNCTION_LINES})")
        lines = body.split("\n")
        for name, first, count in functions(body):
            text = "\n".join(lines[first - 1 : first - 1 + count])
            if re.search(r"\brm_publish\s*\(", text) and not name.startswith("redmutex_") and name != "rm_publish":
                problems.append(f"{f}:{first}: {name} publishes an error but is no public entry point")
            if name.startswith("redmutex_") and re.search(r"\brm_fail\s*\(|&err\b|\berr\s*[,)]", text) \
                    and not re.search(r"\brm_publish\s*\(", text):
                problems.append(f"{f}:{first}: {name} fills an error value but never publishes it")
            if f != "error.c" and re.search(r"\bredmutex_(last_error|last_error_code|clear_error)\s*\(", text):
                problems.append(f"{f}:{first}: {name} reads or clears the thread's last error")
        for callee in sorted(set(re.findall(r"\b((?:rm|redmutex)_\w+)\s*\(", body))):
            home = defined.get(callee)
            if home and home != f and layer.get(home, 0) > layer.get(f, 0) and callee not in UP_CALLS_ALLOWED:
                problems.append(f"{f} calls {callee} of {home}, a layer above it")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"core/src: {len(texts)} files in {len(LAYERS)} layers, calls only downward, sizes within bounds, errors published at the API only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
