#!/usr/bin/env bash
# The redmutex demo: starts its own redis-servers on free loopback ports,
# then has several worker processes fight over one lock to increment a
# counter, first on one server, then as a Redlock over three.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DREDMUTEX_BUILD_BENCH=OFF >/dev/null
ninja -C build-demo contention_demo >/dev/null

dir=$(mktemp -d /tmp/redmutex-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
urls=()
for i in 1 2 3; do
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --logfile "$dir/redis-$i.log" --daemonize no &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  urls+=("redis://127.0.0.1:$port")
done

echo
./build-demo/contention_demo -w 6 -n 50 "${urls[0]}"
echo
./build-demo/contention_demo -w 6 -n 50 "${urls[@]}"
