"""Cross-language worker: python worker.py URL NAME COUNTER_FILE ITERATIONS"""

import sys

import redmutex

url, name, path, n = sys.argv[1:]
with redmutex.Client(url) as client:
    lock = client.lock(name)
    for _ in range(int(n)):
        with lock:
            with open(path) as f:
                value = int(f.read() or 0)
            with open(path, "w") as f:
                f.write(str(value + 1))
