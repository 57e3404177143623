#!/usr/bin/env bash
# test_http_limit_uv.sh: examples/http_limit_uv, the HTTP server on libuv
# that decides through the non-blocking API, run for real on a free
# loopback port and driven by curl (and by raw bytes where curl would not
# send them):
#  - a client's third request under capacity 2 is 429; every answer's
#    RateLimit-Policy, RateLimit and Retry-After fields exact (a token
#    bucket of 2 per 2 h: the requests come well within a second);
#  - X-Client keys are limited apart from each other and from the address;
#  - keep-alive: several requests on one connection (curl reuses it),
#    bodies dropped between them, HEAD without a body, HTTP/1.0;
#  - pipelining: requests sent at once, answered in order;
#  - bad requests: 400 (garbage, no Host, a bare CR), 431 (a header section
#    over 8 KiB), 505 (HTTP/2.0), 501 (Transfer-Encoding), then closed;
#  - clients that go away mid-request, or with answers unread: the server
#    lives on;
#  - shm: two servers on one file share their clients' limits; so do two on
#    one redis-server (redis://, through the non-blocking calls), which
#    also answer, unenforced, when it is gone;
#  - bad arguments exit 2 with a message; SIGTERM and SIGINT stop it,
#    exit 0, also with a connection open.
# Skips (exit 77) only when the server was not built (no libuv) or curl is
# missing; `make test` installs both, so under CI (CI=true, .ci/run) that
# is a failure instead. Run by ctest, which sets SLUICE_EXAMPLES_DIR.
set -uo pipefail

skip() {
    if [ "${CI:-}" = true ]; then
        echo "FAIL (CI=true, where make deps installs it): $*" >&2
        exit 1
    fi
    echo "SKIP: $*"
    exit 77
}
bin=${SLUICE_EXAMPLES_DIR:-build/examples}/http_limit_uv
[ -x "$bin" ] || skip "$bin was not built (libuv not found: make deps installs libuv1-dev)"
command -v curl >/dev/null || skip "curl not found (make deps installs it)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-http.XXXXXX") || exit 1
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
ok() { echo "ok   $*"; }

# start NAME ARGS...: starts a server on a free port; sets $port and $pid
start() {
    local name=$1
    shift
    "$bin" --listen 127.0.0.1:0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 100); do
        grep -q '^listening on ' "$tmp/$name.out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/$name.out")
    if [ -z "$port" ]; then
        echo "FAIL: $name did not start: $(cat "$tmp/$name.out" "$tmp/$name.err")" >&2
        exit 1
    fi
}

# stop PID SIGNAL NAME: the server exits 0 within 5 s of the signal
stop() {
    local p=$1 sig=$2 name=$3 rc
    kill "-$sig" "$p"
    for _ in $(seq 1 100); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$p" 2>/dev/null; then
        fail "$name: still running 5 s after SIG$sig"
        kill -KILL "$p"
        return
    fi
    wait "$p"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$name: exit $rc after SIG$sig: $(cat "$tmp/$name.err")"
    elif ! grep -q 'stopped' "$tmp/$name.err"; then
        fail "$name: no 'stopped' after SIG$sig: $(cat "$tmp/$name.err")"
    else
        ok "$name: SIG$sig: exit 0"
    fi
}

# get NAME CURL_ARGS...: one request; its status in $status, its header
# fields in $tmp/NAME.h (CRs dropped), its body in $tmp/NAME.b
get() {
    local name=$1
    shift
    status=$(curl -s -o "$tmp/$name.b" -D "$tmp/$name.h.raw" -w '%{http_code}' --max-time 5 "$@" \
        "http://127.0.0.1:$port/")
    tr -d '\r' <"$tmp/$name.h.raw" >"$tmp/$name.h"
}

# field NAME FIELD: the value of FIELD in NAME's answer ("" when absent)
field() {
    sed -n "s/^$2: //Ip" "$tmp/$1.h" | head -n 1
}

# expect NAME STATUS [FIELD=VALUE|FIELD=]...: the answer had STATUS and each
# field exactly VALUE (empty: absent)
expect() {
    local name=$1 want=$2 spec f v got bad=0
    shift 2
    if [ "$status" != "$want" ]; then
        fail "$name: status $status, expected $want ($(tr '\n' '|' <"$tmp/$name.h"))"
        return
    fi
    for spec in "$@"; do
        f=${spec%%=*}
        v=${spec#*=}
        got=$(field "$name" "$f")
        if [ "$got" != "$v" ]; then
            fail "$name: $f is '$got', expected '$v'"
            bad=1
        fi
    done
    [ "$bad" -eq 0 ] && ok "$name: $status $(grep -i '^ratelimit:\|^retry-after:' "$tmp/$name.h" | tr '\n' ' ')"
}

# raw NAME: sends stdin's bytes on one connection, reads every answer until
# the server closes it (5 s at most) into $tmp/NAME.raw (CRs dropped)
raw() {
    local name=$1
    exec 3<>"/dev/tcp/127.0.0.1/$port" || {
        fail "$name: cannot connect"
        return
    }
    cat >&3
    timeout 5 cat <&3 | tr -d '\r' >"$tmp/$name.raw"
    exec 3<&- 3>&-
}

statuses() { sed -n 's/^HTTP\/1\.1 \([0-9]*\) .*/\1/p' "$tmp/$1.raw" | tr '\n' ' ' | sed 's/ $//'; }

policy='token-bucket capacity=2 rate=1/h'
quota='"http";q=2;w=7200'
start main --policy "$policy"
main=$pid

# 1. the address's limit: 200, 200, 429, every field exact
get a1
expect a1 200 "RateLimit-Policy=$quota" 'RateLimit="http";r=1;t=3600' "Retry-After="
[ "$(cat "$tmp/a1.b")" = ok ] || fail "a1: body '$(cat "$tmp/a1.b")'"
get a2
expect a2 200 "RateLimit-Policy=$quota" 'RateLimit="http";r=0;t=7200' "Retry-After="
get a3
expect a3 429 "RateLimit-Policy=$quota" 'RateLimit="http";r=0;t=3600' "Retry-After=3600" "Content-Type=text/plain"
[ "$(cat "$tmp/a3.b")" = "too many requests" ] || fail "a3: body '$(cat "$tmp/a3.b")'"

# 2. X-Client keys: each its own limit, apart from the address's
get x1 -H 'X-Client: alice'
expect x1 200 'RateLimit="http";r=1;t=3600'
get x2 -H 'X-Client: bob'
expect x2 200 'RateLimit="http";r=1;t=3600'
get x3 -H 'X-Client: alice'
expect x3 200 'RateLimit="http";r=0;t=7200'
get x4 -H 'X-Client: alice'
expect x4 429 'Retry-After=3600'
get x5
expect x5 429 'RateLimit="http";r=0;t=3600' 'Retry-After=3600'

# 3. keep-alive: three requests on one connection (curl reuses it), the
# first two with bodies the server drops, then HEAD
out=$(curl -s --max-time 5 -H 'X-Client: ka' -w '%{http_code} %{num_connects}\n' \
    -d 'a body of 21 bytes...' -o /dev/null "http://127.0.0.1:$port/a" \
    --next -s -H 'X-Client: ka' -w '%{http_code} %{num_connects}\n' -d 'second' -o /dev/null "http://127.0.0.1:$port/b" \
    --next -s -H 'X-Client: ka' -w '%{http_code} %{num_connects}\n' -o /dev/null "http://127.0.0.1:$port/c" |
    tr '\n' ' ')
if [ "$out" = "200 1 200 0 429 0 " ]; then
    ok "keep-alive: three requests, one connection: $out"
else
    fail "keep-alive: expected '200 1 200 0 429 0 ', got '$out'"
fi
printf 'HEAD / HTTP/1.1\r\nHost: t\r\nX-Client: head\r\nConnection: close\r\n\r\n' | raw head
if [ "$(statuses head)" = 200 ] && grep -q '^Content-Length: 3$' "$tmp/head.raw" &&
   grep -q '^RateLimit: "http";r=1;t=3600$' "$tmp/head.raw" && [ "$(tail -n 1 "$tmp/head.raw")" = "" ]; then
    ok "HEAD: 200, the fields, no body"
else
    fail "HEAD: $(tr '\n' '|' <"$tmp/head.raw")"
fi
get h10 -0 -H 'X-Client: h10'
expect h10 200 "Connection=close"

# 4. pipelining: five requests in one write, answered in order; the last
# closes the connection
printf 'GET /1 HTTP/1.1\r\nHost: t\r\nX-Client: pipe\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\nX-Client: pipe\r\n\r\nPOST /3 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nX-Client: other\r\n\r\nhelloGET /4 HTTP/1.1\r\nHost: t\r\nX-Client: pipe\r\n\r\nGET /5 HTTP/1.1\r\nHost: t\r\nX-Client: other\r\nConnection: close\r\n\r\n' |
    raw pipe
got=$(statuses pipe)
remaining=$(sed -n 's/^RateLimit: "http";r=\([0-9]*\);.*/\1/p' "$tmp/pipe.raw" | tr '\n' ' ')
if [ "$got" = "200 200 200 429 200" ] && [ "$remaining" = "1 0 1 0 0 " ] && grep -q '^Connection: close$' "$tmp/pipe.raw"; then
    ok "pipelining: $got (remaining $remaining), closed after the last"
else
    fail "pipelining: statuses '$got' remaining '$remaining': $(tr '\n' '|' <"$tmp/pipe.raw")"
fi

# 5. bad requests: answered, then the connection closed (raw returns);
# no RateLimit field: the limiter was not asked
bad() {
    local name=$1 want=$2
    raw "$name"
    got=$(statuses "$name")
    if [ "$got" = "$want" ] && grep -q '^Connection: close$' "$tmp/$name.raw" &&
       [ "$(grep -ci '^RateLimit:' "$tmp/$name.raw")" -eq "$(grep -o 200 <<<"$want" | wc -l)" ]; then
        ok "$name: $got, closed"
    else
        fail "$name: expected $want and a close, got '$got': $(tr '\n' '|' <"$tmp/$name.raw")"
    fi
}
printf 'GARBAGE\r\n\r\n' | bad garbage 400
printf 'GET / HTTP/1.1\r\n\r\n' | bad no_host 400
printf 'GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n' | bad two_hosts 400
printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Bad: a\rb\r\n\r\n' | bad bare_cr 400
printf 'GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n' | bad obs_fold 400
printf 'GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n' | bad two_lengths 400
printf 'GET / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n' | bad bad_length 400
printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Client:\r\n\r\n' | bad empty_client 400
printf 'GET / HTTP/2.0\r\nHost: t\r\n\r\n' | bad http2 505
printf 'POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' | bad chunked 501
{ printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Big: '; head -c 9000 /dev/zero | tr '\0' x; printf '\r\n\r\n'; } | bad too_large 431
# the good request before a bad one is answered first
printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Client: before-bad\r\n\r\nBAD\r\n\r\n' | bad good_then_bad "200 400"
# curl's own: a header section over 8 KiB
get big -H "X-Big: $(head -c 9000 /dev/zero | tr '\0' y)"
expect big 431 "Connection=close"

# 6. clients that go away: mid-request, or with many answers unread
for i in 1 2 3; do
    exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Cli' >&3
    exec 3<&- 3>&-
done
exec 3<>"/dev/tcp/127.0.0.1/$port"
for i in $(seq 1 300); do printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Client: gone\r\n\r\n'; done >&3
exec 3<&- 3>&-
sleep 0.2
if kill -0 "$main" 2>/dev/null; then
    get alive -H 'X-Client: alive'
    expect alive 200 'RateLimit="http";r=1;t=3600'
else
    fail "the server died after clients went away: $(cat "$tmp/main.err")"
fi

# 7. stops on SIGTERM, also with an idle keep-alive connection open
exec 4<>"/dev/tcp/127.0.0.1/$port"
stop "$main" TERM main
exec 4<&- 4>&-

# 8. any store: two servers on one shm: file share the limits
start shm1 --policy "$policy" --store "shm:$tmp/limits.shm"
shm1=$pid
port1=$port
start shm2 --policy "$policy" --store "shm:$tmp/limits.shm"
shm2=$pid
port=$port1
get s1 -H 'X-Client: shared'
expect s1 200 'RateLimit="http";r=1;t=3600'
get s2 -H 'X-Client: shared'
expect s2 200 'RateLimit="http";r=0;t=7200'
port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$tmp/shm2.out")
get s3 -H 'X-Client: shared'
expect s3 429 'Retry-After=3600'
stop "$shm1" INT shm1
stop "$shm2" TERM shm2

# 9. bad arguments: exit 2, saying why
args() {
    local name=$1 want=$2 rc
    shift 2
    "$bin" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ] && grep -q -- "$want" "$tmp/$name.out"; then
        ok "$name: exit 2: $(head -1 "$tmp/$name.out")"
    else
        fail "$name: exit $rc, expected 2 and '$want': $(cat "$tmp/$name.out")"
    fi
}
args no_policy "are required" --listen 127.0.0.1:0
args bad_policy "policy" --listen 127.0.0.1:0 --policy 'token-bucket capacity=0 rate=1/s'
args bad_store "unknown" --listen 127.0.0.1:0 --policy "$policy" --store 'nosuch:'
args bad_listen "expected HOST:PORT" --listen nowhere --policy "$policy"
args bad_option "unknown argument" --listen 127.0.0.1:0 --policy "$policy" --frobnicate

# 10. redis://: two servers on one redis-server share the limits, deciding
# through the non-blocking calls (when libsluice-redis and redis-server
# are here; the example says "needs libsluice-redis" otherwise)
"$bin" --listen 127.0.0.1:0 --policy "$policy" --store 'redis://127.0.0.1:1' >"$tmp/redis.out" 2>&1 &
probe=$!
sleep 0.3
if ! kill -0 "$probe" 2>/dev/null && grep -q "needs libsluice-redis" "$tmp/redis.out"; then
    ok "redis:// store: not built here: $(head -1 "$tmp/redis.out")"
elif ! command -v redis-server >/dev/null; then
    kill -KILL "$probe" 2>/dev/null
    if [ "${CI:-}" = true ]; then fail "redis-server not found (make deps installs it)"; else echo "SKIP: redis:// (no redis-server)"; fi
else
    kill -TERM "$probe" 2>/dev/null
    wait "$probe" 2>/dev/null
    rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis-server.log" 2>&1 &
    rpid=$!
    pids+=("$rpid")
    for _ in $(seq 1 100); do
        redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break
        sleep 0.05
    done
    start r1 --policy "$policy" --store "redis://127.0.0.1:$rport"
    r1=$pid
    port1=$port
    start r2 --policy "$policy" --store "redis://127.0.0.1:$rport"
    r2=$pid
    port2=$port
    port=$port1
    get rs1 -H 'X-Client: shared'
    expect rs1 200 'RateLimit="http";r=1;t=3600'
    port=$port2
    get rs2 -H 'X-Client: shared'
    expect rs2 200 'RateLimit="http";r=0;t=7200'
    port=$port1
    get rs3 -H 'X-Client: shared'
    expect rs3 429 'Retry-After=3600'
    # pipelined requests on one connection, each decided on the server, in order
    port=$port1
    printf 'GET / HTTP/1.1\r\nHost: t\r\nX-Client: piped\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nX-Client: piped\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\nX-Client: piped\r\nConnection: close\r\n\r\n' |
        raw rpipe
    codes=$(statuses rpipe)
    if [ "$codes" = "200 200 429" ]; then ok "redis:// pipelined: $codes"; else fail "redis:// pipelined: '$codes', expected '200 200 429'"; fi
    # the server goes away: on_error=allow (the default) admits, unenforced,
    # a client the server never denied ("shared" it did: the store's cache
    # of denials still answers it, until its retry runs out)
    kill -KILL "$rpid"
    wait "$rpid" 2>/dev/null
    get rs4 -H 'X-Client: unseen'
    if [ "$status" = 200 ]; then ok "redis:// down: 200 (on_error=allow)"; else fail "redis:// down: status $status"; fi
    get rs5 -H 'X-Client: shared'
    if [ "$status" = 429 ]; then ok "redis:// down: a cached denial, 429"; else fail "redis:// down, cached denial: status $status"; fi
    stop "$r1" TERM r1
    stop "$r2" INT r2
fi

if [ "$failures" -ne 0 ]; then
    echo "test_http_limit_uv: $failures failure(s)" >&2
    exit 1
fi
echo "test_http_limit_uv: ok"
