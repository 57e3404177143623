#!/usr/bin/env bash
# bench_http.sh: the example server (examples/http_limit_uv, deciding
# through the non-blocking API) under a real load generator, wrk: requests
# per second on memory: and on redis:// (a redis-server of its own on a
# free loopback port), one wrk thread, 32 connections, 3 s each, every
# request the same client key under a policy that admits them all (so the
# figure is the decision path, not 429s). Part of `make bench`; skips with
# a message when wrk, redis-server or the example is missing.
# Usage: bench/bench_http.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build}
bin=$build/examples/http_limit_uv
if [ ! -x "$bin" ]; then echo "bench_http: skipped: $bin not built (no libuv)"; exit 0; fi
if ! command -v wrk >/dev/null; then echo "bench_http: skipped: wrk not installed (apt-get install wrk)"; exit 0; fi
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

# serve NAME URL: the example on a free port for URL; sets $port
serve() {
    "$bin" --listen 127.0.0.1:0 --policy 'token-bucket capacity=1000000000 rate=1000000000/s' --store "$2" \
        >"$tmp/$1.out" 2>"$tmp/$1.err" &
    pids+=($!)
    disown
    for _ in $(seq 1 100); do
        grep -q '^listening on ' "$tmp/$1.out" 2>/dev/null && break
        sleep 0.05
    done
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/$1.out")
    [ -n "$port" ] || { echo "bench_http: $1 did not start: $(cat "$tmp/$1.err")"; exit 1; }
}

# load NAME LABEL: wrk against $port; prints its requests/s and latency
load() {
    wrk -t1 -c32 -d3s -H 'X-Client: bench' "http://127.0.0.1:$port/" >"$tmp/$1.wrk" 2>&1
    local rps lat non2xx
    rps=$(sed -n 's/^Requests\/sec: *//p' "$tmp/$1.wrk")
    lat=$(awk '/Latency/ {print $2; exit}' "$tmp/$1.wrk")
    non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' "$tmp/$1.wrk")
    printf '%-44s %12s req/s   latency avg %8s   non-2xx %s\n' "http_limit_uv $2, wrk -t1 -c32 -d3s" "${rps:-?}" \
        "${lat:-?}" "${non2xx:-0}"
}

echo "== bench_http: the example server under wrk"
serve memory memory:
load memory memory:
if command -v redis-server >/dev/null; then
    rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
    pids+=($!)
    disown
    for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
    serve redis "redis://127.0.0.1:$rport"
    load redis redis://
else
    echo "bench_http: redis://: skipped: redis-server not installed"
fi
