#!/usr/bin/env bash
# test_redis_cli.sh: `sluice simulate SPEC --store redis://...?clock=client`
# prints exactly what the same simulate prints with the memory store, on a
# small trace (every algorithm, a composite, binary-ish keys, a time that
# goes back, verb lines, shadow parts); and check, peek, refund and reset
# across invocations on one Redis key (nothing created by a peek, a reset
# deleting every name, a retune keeping usage). It starts its own redis-server on a free loopback port in a
# temporary directory and stops it on exit, whatever happens.
# ctest sets SLUICE_BIN to the built sluice binary. REDIS_SERVER and
# REDIS_CLI override the programs' names.
set -u

. "$(dirname "$0")/cli_test.sh" test_redis_cli

redis_server=${REDIS_SERVER:-redis-server}
redis_cli=${REDIS_CLI:-redis-cli}
for prog in "$redis_server" "$redis_cli"; do
    command -v "$prog" >/dev/null || { echo "test_redis_cli: $prog not found" >&2; exit 1; }
done

# a build without libsluice-redis (no hiredis) has no Redis store to test
if "$SLUICE_BIN" simulate 'fixed-window limit=1 window=1s' --store 'redis://127.0.0.1:1' </dev/null 2>&1 |
    grep -q 'needs libsluice-redis'; then
    echo "test_redis_cli: sluice was built without libsluice-redis: nothing to test"
    exit 0
fi

server_pid=
cleanup() {
    if [[ -n "$server_pid" ]]; then
        kill -KILL "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port: a port the kernel hands out for port 0 (bound, read back,
# released).
free_port() {
    local p
    if p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null); then
        echo "$p"
        return 0
    fi
    # no python3: perl, then bash's own /dev/tcp probe on random ports
    if p=$(perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0)->sockport' 2>/dev/null); then
        echo "$p"
        return 0
    fi
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# start_server: redis-server on a free port, answering PING (bounded wait).
start_server() {
    local tries
    for tries in 1 2 3 4 5; do
        port=$(free_port) || { echo "test_redis_cli: no free port" >&2; return 1; }
        "$redis_server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
            >"$tmp/redis-$port.log" 2>&1 &
        server_pid=$!
        local i
        for i in $(seq 1 200); do # 200 x 25 ms: 5 s at most
            if [[ "$("$redis_cli" -h 127.0.0.1 -p "$port" PING 2>/dev/null)" == PONG ]]; then
                return 0
            fi
            kill -0 "$server_pid" 2>/dev/null || break # it died (port taken?): another port
            sleep 0.025
        done
        kill -KILL "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
        server_pid=
    done
    echo "test_redis_cli: cannot start $redis_server (logs in $tmp)" >&2
    cat "$tmp"/redis-*.log >&2
    return 1
}

start_server || exit 1

# same NAME SPEC [ARGS...]: simulate on memory: and on Redis (a key space of
# its own per case) print the same lines and the same counts.
case_no=0
same() {
    local name=$1 spec=$2
    shift 2
    case_no=$((case_no + 1))
    local url="redis://127.0.0.1:$port?clock=client&timeout_ms=10000&prefix=case$case_no:"
    "$SLUICE_BIN" simulate "$spec" "$@" <"$tmp/in" >"$tmp/mem.out" 2>"$tmp/mem.err"
    local rc_mem=$?
    "$SLUICE_BIN" simulate "$spec" --store "$url" "$@" <"$tmp/in" >"$tmp/redis.out" 2>"$tmp/redis.err"
    local rc_redis=$?
    [[ $rc_mem -eq 0 ]] || fail "$name: memory: exited $rc_mem: $(cat "$tmp/mem.err")"
    [[ $rc_redis -eq 0 ]] || fail "$name: redis: exited $rc_redis: $(cat "$tmp/redis.err")"
    if [[ ! -s "$tmp/mem.out" ]]; then
        fail "$name: no output"
    elif ! cmp -s "$tmp/mem.out" "$tmp/redis.out"; then
        fail "$name: stdout differs (- memory, + redis):"
        diff -u "$tmp/mem.out" "$tmp/redis.out" | head -30 | cat -v >&2
    fi
    # the summary: same counts (keys held are the store's own matter: the
    # Redis store counts its names, a log part has a name of its own)
    local want got
    want=$(sed -n 's/^# \([0-9]* requests, [0-9]* allowed, [0-9]* denied\).*/\1/p' "$tmp/mem.err")
    got=$(sed -n 's/^# \([0-9]* requests, [0-9]* allowed, [0-9]* denied\).*/\1/p' "$tmp/redis.err")
    [[ -n "$want" && "$want" == "$got" ]] || fail "$name: summary \"$got\", memory store \"$want\""
    # and the store really was Redis: its names are there
    local held
    held=$("$redis_cli" -h 127.0.0.1 -p "$port" --scan --pattern "case$case_no:*" | wc -l)
    [[ "$held" -gt 0 ]] || fail "$name: nothing held in Redis under case$case_no:"
}

# a small trace: hot and cold keys, bursts at one ms, costs, idle gaps
{
    t=1000
    for i in $(seq 0 119); do
        case $((i % 7)) in
        0 | 1 | 2) t=$((t + 0)) ;;
        3) t=$((t + 1)) ;;
        4) t=$((t + 3)) ;;
        5) t=$((t + 11)) ;;
        6) t=$((t + (i % 3) * 40)) ;;
        esac
        key=alice
        ((i % 3 == 1)) && key=bob
        ((i % 11 == 5)) && key="k:{x}|$i"
        cost=1
        ((i % 9 == 4)) && cost=2
        echo "$t $key $cost"
    done
    echo "# an idle hour, then a burst"
    echo "3601000 alice"
    echo "3601000 alice 3"
    echo "3601000 bob"
} >"$tmp/in"

same token-bucket 'token-bucket capacity=3 rate=1/7ms'
same leaky-bucket 'leaky-bucket capacity=4 rate=2/9ms'
same fixed-window 'fixed-window limit=5 window=13ms'
same sliding-window 'sliding-window limit=6 window=11ms'
same sliding-log 'sliding-log limit=5 window=17ms'
same gcra 'gcra rate=3/10ms burst=3'
same composite 'sliding-window limit=4 window=7ms; sliding-log limit=5 window=15ms; leaky-bucket capacity=3 rate=1/3ms'

# times that go back (the store's time stays at the highest), negative times
{
    echo "-5000 a"
    echo "-4990 a"
    echo "-5000 a"
    echo "-4000 b 2"
    echo "-4001 a"
    echo "0 a"
    echo "5 a 3"
    echo "2 a"
} >"$tmp/in"
same backwards 'fixed-window limit=3 window=1s; sliding-log limit=4 window=20ms' --allow-backwards

# verb lines (peek, refund, reset) among the requests, shadow parts, a
# retune: simulate prints the same lines on Redis as on memory:
{
    t=1000
    for i in $(seq 0 89); do
        t=$((t + (i % 5 == 4 ? 7 : i % 3)))
        key=alice
        ((i % 4 == 1)) && key=bob
        case $((i % 13)) in
        2 | 9) echo "$t $key peek $((i % 2 + 1))" ;;
        5) echo "$t $key refund $((i % 3 + 1))" ;;
        11) echo "$t $key reset" ;;
        *) echo "$t $key" ;;
        esac
    done
    echo "5000 carol peek"     # a key never seen: nothing created
    echo "5000 carol refund 1" # nor by a refund
    echo "5000 alice"
} >"$tmp/in"
same verbs-token-bucket 'token-bucket capacity=3 rate=1/7ms'
same verbs-sliding-log 'sliding-log limit=4 window=15ms'
same verbs-sliding-window 'sliding-window limit=4 window=9ms'
same verbs-shadow 'fixed-window limit=4 window=13ms; shadow sliding-log limit=2 window=9ms; shadow token-bucket capacity=1 rate=1/5ms'
grep -q 'shadow_denied=1' "$tmp/redis.out" || fail "verbs-shadow: no line says shadow_denied=1"
grep -q 'verb=refund' "$tmp/redis.out" || fail "verbs-shadow: no refund line"

# ---- peek, refund, reset across invocations, on Redis ----------------------
# token-bucket C=2 at 1/h (clock=client, every reading 0): each invocation
# is a process of its own; the key lives in Redis.
names() { "$redis_cli" -h 127.0.0.1 -p "$port" --scan --pattern "$1*" | wc -l; }
V="redis://127.0.0.1:$port?clock=client&timeout_ms=10000&prefix=verbs:"
T='token-bucket capacity=2 rate=1/h'
vb() { # NAME EXIT LINE VERB ARGS...: sluice VERB ARGS on $V at reading 0 prints LINE, exits EXIT
    local name=$1 code=$2 line=$3
    shift 3
    "$SLUICE_BIN" "$@" --store "$V" --manual-clock 0 </dev/null >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [[ $rc -eq $code && "$(cat "$tmp/out")" == "$line" ]] ||
        fail "$name: exit $rc (want $code), stdout '$(cat "$tmp/out")' (want '$line'), stderr $(cat "$tmp/err")"
}
vb "verbs: check" 0 "allowed remaining=1 reset_ms=3600000" check k --policy "$T"
vb "verbs: peek" 0 "allowed remaining=0 reset_ms=7200000" peek k --policy "$T"
vb "verbs: peek --cost 2" 1 "denied retry_after_ms=3600000 remaining=1 reset_ms=3600000" peek k --policy "$T" --cost 2
vb "verbs: peek --json" 0 \
    '{"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":7200000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":7200000,"shadow_denied":false,"local":false}' \
    peek k --policy "$T" --json
vb "verbs: peek of a key not held" 0 "allowed remaining=1 reset_ms=3600000" peek nobody --policy "$T"
[[ $(names verbs:) -eq 1 ]] || fail "verbs: peeks changed the names held: $(names verbs:), want 1"
vb "verbs: check after the peeks" 0 "allowed remaining=0 reset_ms=7200000" check k --policy "$T"
vb "verbs: check, empty" 1 "denied retry_after_ms=3600000 remaining=0 reset_ms=7200000" check k --policy "$T"
vb "verbs: refund" 0 "allowed remaining=0 reset_ms=7200000" refund k --policy "$T" --cost 1
vb "verbs: check after the refund" 0 "allowed remaining=0 reset_ms=7200000" check k --policy "$T"
vb "verbs: refund 2" 0 "allowed remaining=1 reset_ms=3600000" refund k --policy "$T" --cost 2
vb "verbs: refund 2 again: never beyond fresh" 0 "allowed remaining=1 reset_ms=3600000" refund k --policy "$T" --cost 2
vb "verbs: refund of a key not held" 0 "allowed remaining=1 reset_ms=3600000" refund nobody --policy "$T" --cost 1
[[ $(names verbs:) -eq 1 ]] || fail "verbs: a refund of a key not held created a name"
vb "verbs: check, then another SPEC of the name" 0 "allowed remaining=1 reset_ms=3600000" check k --policy "$T"
# retune: capacity 3, the backlog of 1 carried: cost 1 leaves 1
vb "verbs: retune keeps the key's usage" 0 "allowed remaining=1 reset_ms=7200000" \
    check k --policy 'token-bucket capacity=3 rate=1/h'
vb "verbs: reset" 0 "allowed remaining=2 reset_ms=3600000" reset k --policy 'token-bucket capacity=3 rate=1/h'
[[ $(names verbs:) -eq 0 ]] || fail "verbs: reset left $(names verbs:) names"
vb "verbs: fresh after the reset" 0 "allowed remaining=1 reset_ms=3600000" check k --policy "$T"
# a sliding log's set goes too, in the same reset
vb "verbs: a log" 0 "allowed remaining=1 reset_ms=3600000" check g --policy 'sliding-log limit=2 window=1h' --name logs
[[ $(names "verbs:{logs|") -eq 2 ]] || fail "verbs: a log part has $(names "verbs:{logs|") names, want 2"
vb "verbs: reset of a log" 0 "allowed remaining=1 reset_ms=3600000" reset g --policy 'sliding-log limit=2 window=1h' --name logs
[[ $(names "verbs:{logs|") -eq 0 ]] || fail "verbs: reset left a log's names"
# a shadow part that would deny: shadow_denied=1, and counted in stats
SH='fixed-window limit=5 window=1h; shadow fixed-window limit=1 window=1h'
vb "verbs: shadow 1" 0 "allowed remaining=4 reset_ms=3600000" check s --policy "$SH"
vb "verbs: shadow 2" 0 "allowed remaining=3 reset_ms=3600000 shadow_denied=1" check s --policy "$SH"
vb "verbs: shadow peek" 0 "allowed remaining=2 reset_ms=3600000 shadow_denied=1" peek s --policy "$SH"
# bad arguments: exit 2, nothing sent
before=$(names verbs:)
"$SLUICE_BIN" refund k --policy "$T" --cost 3 --store "$V" >/dev/null 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "verbs: refund --cost 3 (above the limit): not exit 2"
"$SLUICE_BIN" peek k --policy "$T" --cost 0 --store "$V" >/dev/null 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "verbs: peek --cost 0: not exit 2"
[[ $(names verbs:) -eq $before ]] || fail "verbs: bad arguments changed the names held"

# a bad line stops both runs at the same place, with status 2
printf '0 a\n1 a 0\n2 a\n' >"$tmp/in"
"$SLUICE_BIN" simulate 'token-bucket capacity=2 rate=1/s' <"$tmp/in" >"$tmp/mem.out" 2>/dev/null
rc_mem=$?
"$SLUICE_BIN" simulate 'token-bucket capacity=2 rate=1/s' --store "redis://127.0.0.1:$port?clock=client&prefix=bad:" \
    <"$tmp/in" >"$tmp/redis.out" 2>/dev/null
rc_redis=$?
[[ $rc_mem -eq 2 && $rc_redis -eq 2 ]] || fail "bad line: exit $rc_mem (memory), $rc_redis (redis), want 2"
cmp -s "$tmp/mem.out" "$tmp/redis.out" || fail "bad line: output before it differs"

# a bad store URL is a usage error naming the parameter
"$SLUICE_BIN" simulate 'token-bucket capacity=2 rate=1/s' --store "redis://127.0.0.1:$port?clock=sometimes" \
    </dev/null >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "bad store URL: exit $rc, want 2"
grep -q "clock=sometimes" "$tmp/err" || fail "bad store URL: message does not name clock=sometimes: $(cat "$tmp/err")"

# ---- a store that cannot decide: said, and --strict makes it an error -------
# "dead": a port where nothing listens. Every decision there is made by
# on_error (allow by default: admitted, not counted).
dead="redis://127.0.0.1:1?connect_timeout_ms=50"
P='fixed-window limit=1 window=1m'
sl() { # ARGS...: sluice ARGS with $tmp/in on stdin; sets rc, $tmp/out, $tmp/err
    "$SLUICE_BIN" "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
warned() { # NAME CMD: one warning line on stderr, naming the server's reason
    [[ $(grep -c "^sluice $2: warning: .*could not decide" "$tmp/err") -eq 1 ]] ||
        fail "$1: not one warning on stderr: $(cat "$tmp/err")"
    grep -q 'Connection refused' "$tmp/err" || fail "$1: the warning does not give the reason: $(cat "$tmp/err")"
}
: >"$tmp/in"
sl check k --policy "$P" --store "$dead"
[[ $rc -eq 0 && "$(cat "$tmp/out")" == 'allowed remaining=0 reset_ms=0 enforced=false' ]] ||
    fail "check, no server: exit $rc, stdout '$(cat "$tmp/out")'"
warned "check, no server" check
grep -q 'admitted without being counted' "$tmp/err" || fail "check, no server: $(cat "$tmp/err")"
sl check k --policy "$P" --store "$dead&on_error=deny"
[[ $rc -eq 1 ]] || fail "check, no server, on_error=deny: exit $rc, want 1"
warned "check, no server, on_error=deny" check
grep -q 'denied without being counted' "$tmp/err" || fail "check, on_error=deny: $(cat "$tmp/err")"
sl check k --policy "$P" --store "$dead" --strict
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "check --strict, no server: exit $rc, stdout '$(cat "$tmp/out")'"
grep -q 'Connection refused' "$tmp/err" || fail "check --strict, no server: no reason: $(cat "$tmp/err")"
sl check k --policy "$P" --store "$dead&on_error=allow" --strict --json
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "check --strict, on_error=allow: exit $rc, stdout '$(cat "$tmp/out")'"
grep -q 'could not decide (--strict): .*Connection refused' "$tmp/err" || fail "check --strict, on_error=allow: $(cat "$tmp/err")"
sl run k --policy "$P" --store "$dead" -- echo ran
[[ $rc -eq 0 && "$(cat "$tmp/out")" == ran ]] || fail "run, no server: exit $rc, stdout '$(cat "$tmp/out")'"
warned "run, no server" run
sl run k --policy "$P" --store "$dead" --strict -- echo ran
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "run --strict, no server: exit $rc, stdout '$(cat "$tmp/out")'"
grep -q 'Connection refused' "$tmp/err" || fail "run --strict, no server: no reason: $(cat "$tmp/err")"
sl stats --store "$dead"
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "stats, no server: exit $rc, stdout '$(cat "$tmp/out")'"
grep -q "^sluice stats: .*127.0.0.1:1" "$tmp/err" || fail "stats, no server: $(cat "$tmp/err")"
sl stats --store "$dead" --json
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "stats --json, no server: exit $rc"
seq 5 >"$tmp/in"
sl pipe --policy "$P" --store "$dead"
[[ $rc -eq 0 ]] || fail "pipe, no server: exit $rc: $(cat "$tmp/err")"
cmp -s "$tmp/in" "$tmp/out" || fail "pipe, no server: output differs from input"
warned "pipe, no server" pipe
printf '0 a\n0 a\n5 b\n' >"$tmp/in"
sl simulate "$P" --store "$dead"
[[ $rc -eq 0 && $(grep -c ' enforced=false$' "$tmp/out") -eq 3 ]] ||
    fail "simulate, no server: exit $rc, stdout $(cat "$tmp/out")"
warned "simulate, no server" simulate
grep -qx '# 3 requests, 3 allowed, 0 denied, 3 not enforced' "$tmp/err" || fail "simulate, no server: summary: $(cat "$tmp/err")"

sl peek k --policy "$P" --store "$dead"
[[ $rc -eq 0 && "$(cat "$tmp/out")" == 'allowed remaining=0 reset_ms=0 enforced=false' ]] ||
    fail "peek, no server: exit $rc, stdout '$(cat "$tmp/out")'"
[[ $(grep -c "^sluice peek: warning: the store could not answer.*Connection refused" "$tmp/err") -eq 1 ]] ||
    fail "peek, no server: not one warning with the reason: $(cat "$tmp/err")"
# a refund or reset the store cannot make: an error (opened with on_error=error)
for v in "refund --cost 1" reset; do
    sl $v k --policy "$P" --store "$dead"
    [[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "$v, no server: exit $rc, stdout '$(cat "$tmp/out")'"
    grep -q 'Connection refused' "$tmp/err" || fail "$v, no server: no reason: $(cat "$tmp/err")"
done

# The same against the server: enforced, nothing on stderr.
live="redis://127.0.0.1:$port?prefix=live:"
: >"$tmp/in"
for strict in "" --strict; do
    sl check k --policy "$P" --store "$live" $strict
    [[ $rc -eq 0 && "$(cat "$tmp/out")" =~ ^allowed\ remaining=0\ reset_ms=[0-9]+$ ]] ||
        fail "check $strict, a server: exit $rc, stdout '$(cat "$tmp/out")'"
    [[ -s "$tmp/err" ]] && fail "check $strict, a server: stderr: $(cat "$tmp/err")"
    "$redis_cli" -h 127.0.0.1 -p "$port" FLUSHALL >/dev/null
done
sl run k --policy "$P" --store "$live" --strict -- echo ran
[[ $rc -eq 0 && "$(cat "$tmp/out")" == ran && ! -s "$tmp/err" ]] || fail "run --strict, a server: exit $rc: $(cat "$tmp/err")"
sl stats --store "$live"
[[ $rc -eq 0 ]] || fail "stats, a server: exit $rc: $(cat "$tmp/err")"
grep -Eqx 'keys: [0-9]+' "$tmp/out" || fail "stats, a server: $(cat "$tmp/out")"

cli_test_end "$case_no traces identical on redis:// and memory:"
