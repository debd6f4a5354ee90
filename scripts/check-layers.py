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

Headers count too: a `static inline` function or a function-like macro
defined in a core/src header belongs to a layer (that of the .c file of the
same base name, or of X.c for X_state.h, the struct of module X's state,
or HEADER_LAYERS for a header without one), its calls are
checked like a .c function's, and a call into it is a call into that layer.
Otherwise an up-call could hide in a header, which the compiler inlines into
every file below.

Reads the C files as text (a function is a line that starts a definition at
column 0 up to the closing brace at column 0), which is how core/src is
written; a header inline is `static inline` at column 0 up to its matching
brace, a macro `#define NAME(` up to its last continued line. Exits 1 and
lists what breaks the rules.
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
    ["request.c", "attempt.c", "waitstep.c", "acquire.c", "release.c", "extend.c", "query.c"],
    ["pollwait.c", "waitready.c", "waitfd.c"],
    ["lifetime.c", "client.c"],
    ["semaphore.c", "latch.c", "multilock.c", "multiattempt.c"],
]
# Headers without a .c file of their own name, or whose inlines serve a layer
# other than that file's: client.h's inlines only take the client's mutex or
# read its closed flag, which every layer does, so they sit at the bottom with
# the struct they read (the client's own functions are client.c's, layer 12).
HEADER_LAYERS = {
    "internal.h": 0,
    "client.h": 0,
    "lua.h": 1,
    "lockops.h": 10,
    "multilock.h": 13,
}
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


def header_definitions(body):
    """(name, first line, line count, body text) of each static inline function
    and function-like macro of a header (comments and strings stripped)."""
    out = []
    for m in re.finditer(r"^static\s+inline\b[^;{(]*?\b(\w+)\s*\(", body, flags=re.M):
        brace = body.find("{", m.end())
        semi = body.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        depth, i = 0, brace
        while i < len(body):
            depth += {"{": 1, "}": -1}.get(body[i], 0)
            if depth == 0:
                break
            i += 1
        first = body.count("\n", 0, m.start()) + 1
        out.append((m.group(1), first, body.count("\n", m.start(), i) + 1, body[brace : i + 1]))
    lines = body.split("\n")
    for n, line in enumerate(lines):
        m = re.match(r"^#\s*define\s+(\w+)\(", line)
        if not m:
            continue
        end = n
        while lines[end].rstrip().endswith("\\") and end + 1 < len(lines):
            end += 1
        text = "\n".join(lines[n : end + 1])
        params = text.find(")", m.end())
        out.append((m.group(1), n + 1, end - n + 1, text[params + 1 :]))
    return out


def callees(text):
    """Functions and function-like macros of the core that text calls."""
    return set(re.findall(r"\b((?:rm|redmutex|RM)_\w+)\s*\(", text))


def main():
    # The tree to check: core/src, or another given as the one argument (the
    # checker's own test plants up-calls in a copy).
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "core", "src")
    layer = {f: n for n, files in enumerate(LAYERS) for f in files}
    texts = {os.path.basename(p): open(p).read() for p in glob.glob(os.path.join(src, "*.c"))}
    headers = {os.path.basename(p): open(p).read() for p in glob.glob(os.path.join(src, "*.h"))}
    problems = [f"{f}: not in any layer (scripts/check-layers.py)" for f in texts if f not in layer]
    for h in sorted(headers):
        if h in HEADER_LAYERS:
            layer[h] = HEADER_LAYERS[h]
        elif h[:-2] + ".c" in layer:
            layer[h] = layer[h[:-2] + ".c"]
        elif h.endswith("_state.h") and h[: -len("_state.h")] + ".c" in layer:
            layer[h] = layer[h[: -len("_state.h")] + ".c"]  # a module's state struct (client.h embeds it)
        else:
            problems.append(f"{h}: no .c file of its name and not in HEADER_LAYERS (scripts/check-layers.py)")
    inlines = {h: header_definitions(strip(text)) for h, text in headers.items()}
    defined = {}
    for f, text in texts.items():
        for name, _, _ in functions(strip(text)):
            defined.setdefault(name, f)
    for h, defs in inlines.items():
        for name, _, _, _ in defs:
            defined.setdefault(name, h)
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
        for callee in sorted(callees(body)):
            home = defined.get(callee)
            if home and home != f and layer.get(home, 0) > layer.get(f, 0) and callee not in UP_CALLS_ALLOWED:
                problems.append(f"{f} calls {callee} of {home}, a layer above it")
    for h, defs in sorted(inlines.items()):
        n_lines = headers[h].count("\n")
        if n_lines > MAX_FILE_LINES:
            problems.append(f"{h}: {n_lines} lines (at most {MAX_FILE_LINES})")
        for name, first, count, body in defs:
            if count > MAX_FUNCTION_LINES:
                problems.append(f"{h}:{first}: {name} is {count} lines (at most {MAX_FUNCTION_LINES})")
            for callee in sorted(callees(body) - {name}):
                home = defined.get(callee)
                if home and home != h and layer.get(home, 0) > layer.get(h, 0) and callee not in UP_CALLS_ALLOWED:
                    problems.append(f"{h}:{first}: {name} calls {callee} of {home}, a layer above it")
    for p in problems:
        print(p)
    if problems:
        return 1
    n_inlines = sum(len(d) for d in inlines.values())
    print(f"core/src: {len(texts)} files and {len(headers)} headers ({n_inlines} inlines and macros) in "
          f"{len(LAYERS)} layers, calls only downward, sizes within bounds, errors published at the API only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
