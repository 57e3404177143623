#!/usr/bin/env bash
# test_demo.sh: `sluice demo` prints exactly the text below, and the CLI's
# exit codes hold (help: 0, unknown command: 2, usage on stderr).
# ctest sets SLUICE_BIN to the built sluice binary.
#
# The expected text is the scenarios of the design sluice grew from (its
# Main), with their figures, printed as the CLI prints decisions ("allowed
# remaining=R", "denied retry_after_ms=X"), for users: no design records, no
# Java. Where sluice's exact answers differ from a boundary hint, "# " lines
# say why. The per-key part (alice, alice, alice, bob; tracked keys; a
# caller's two branches on alice) runs on a memory store with a manual
# clock: token-bucket capacity=2 rate=1/s, every request at t=0.
set -u

. "$(dirname "$0")/cli_test.sh" test_demo

# ---- sluice demo: the whole stdout ----

cat >"$tmp/expected" <<'EOF'
a token bucket: token-bucket capacity=3 rate=1/s (3 tokens, one back a second)
t=0      allowed remaining=2
t=0      allowed remaining=1
t=0      allowed remaining=0
t=0      denied retry_after_ms=1000
t=500    denied retry_after_ms=500
t=1000   allowed remaining=0
t=61000  cost=3 allowed remaining=0 (a minute idle refills 3 tokens, no more)
rejected: cost 5 is outside 1..3
rejected: capacity 0 is outside 1..1000000000

a sliding window: sliding-window limit=10 window=1s (the last window's count fades out)
t=900    cost=10 allowed remaining=0
t=1000   denied retry_after_ms=100
# the exact earliest retry, not the next window boundary (1000 ms away): at
# t=1100 the previous window's 10 weigh 10*900/1000 = 9, and 9 + 1 <= 10.
t=1500   cost=5 allowed remaining=0
t=1500   denied retry_after_ms=100
# again not the next boundary (500 ms away): at t=1600 the previous window
# weighs 10*400/1000 = 4, and 4 + 5 + 1 <= 10. The weight is compared exactly,
# prev*(W-e) + (cur+n)*W <= L*W, never rounded down (which would take
# 9.5 + 1 for 9 + 1 <= 10 and admit one too many).

a fixed window: fixed-window limit=10 window=1s (the burst at a boundary)
allowed at t=999: 10, at t=1000: 10, within 1 ms: 20

per key (a memory: store): token-bucket capacity=2 rate=1/s, every request at t=0
alice    allowed remaining=1
alice    allowed remaining=0
alice    denied retry_after_ms=1000
bob      allowed remaining=1
tracked keys: 2
alice again: wait 1000 ms

8 threads, one limiter: token-bucket capacity=100 rate=1/s, a clock that stands still
attempts: 400, allowed: 100
EOF

"$SLUICE_BIN" demo >"$tmp/actual" 2>"$tmp/stderr"
rc=$?
if [[ $rc -ne 0 ]]; then
    fail "sluice demo exited $rc"
    cat "$tmp/stderr" >&2
fi
if ! diff -u "$tmp/expected" "$tmp/actual" >"$tmp/diff"; then
    fail "sluice demo output differs from the expected text (- expected, + actual):"
    cat "$tmp/diff" >&2
fi
if [[ -s "$tmp/stderr" ]]; then
    fail "sluice demo wrote to stderr:"
    cat "$tmp/stderr" >&2
fi

# ---- what users read speaks to them: no design documents, no Java ----
for args in demo help "demo --help" "simulate --help" "check --help" "run --help" "pipe --help" \
    "stats --help" "version --help"; do
    # shellcheck disable=SC2086 # the words of args are the arguments
    "$SLUICE_BIN" $args >"$tmp/out" 2>&1
    if grep -Eni 'seed|java|Allowed\[|Denied\[|retryAfterMs' "$tmp/out" >"$tmp/hits"; then
        fail "sluice $args speaks of the design, not to users: $(cat "$tmp/hits")"
    fi
done

# ---- exit codes and where usage goes ----

for flag in help --help -h; do
    "$SLUICE_BIN" "$flag" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 0 ]] || fail "sluice $flag exited $rc, want 0"
    grep -q '^usage: sluice' "$tmp/out" || fail "sluice $flag: no usage on stdout"
    for cmd in demo simulate version help; do
        grep -Eq "^  $cmd " "$tmp/out" || fail "sluice $flag: usage does not list $cmd"
    done
    [[ -s "$tmp/err" ]] && fail "sluice $flag wrote to stderr"
done

"$SLUICE_BIN" nosuch >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "sluice nosuch exited $rc, want 2"
[[ -s "$tmp/out" ]] && fail "sluice nosuch wrote to stdout"
grep -q '^usage: sluice' "$tmp/err" || fail "sluice nosuch: no usage on stderr"

"$SLUICE_BIN" >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "sluice (no command) exited $rc, want 2"
grep -q '^usage: sluice' "$tmp/err" || fail "sluice (no command): no usage on stderr"

"$SLUICE_BIN" demo extra >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 ]] || fail "sluice demo extra exited $rc, want 2"

"$SLUICE_BIN" version >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] || fail "sluice version exited $rc, want 0"
grep -Eq '^sluice [0-9]+\.[0-9]+\.[0-9]+$' "$tmp/out" || fail "sluice version printed '$(cat "$tmp/out")'"
# then the monotonic clock's source: the TSC where the kernel keeps time
# with it and the CPU says it is invariant (x86-64), unless SLUICE_CLOCK=monotonic
[[ $(wc -l <"$tmp/out") -eq 2 ]] || fail "sluice version printed $(wc -l <"$tmp/out") lines, want 2"
grep -Eqx 'clock: (tsc|CLOCK_MONOTONIC_COARSE|CLOCK_MONOTONIC)' "$tmp/out" ||
    fail "sluice version names no clock source: '$(cat "$tmp/out")'"
want_tsc=no
if [[ $(uname -m) == x86_64 && $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null) == tsc ]] &&
    { grep -m1 '^flags' /proc/cpuinfo | grep -qw constant_tsc && grep -m1 '^flags' /proc/cpuinfo | grep -qw nonstop_tsc; }; then
    want_tsc=yes
fi
if [[ $want_tsc == yes && ${SLUICE_CLOCK:-} != monotonic ]]; then
    grep -qx 'clock: tsc' "$tmp/out" || fail "kernel clocksource tsc, invariant TSC, but sluice version says '$(cat "$tmp/out")'"
fi
SLUICE_CLOCK=monotonic "$SLUICE_BIN" version >"$tmp/mono" 2>"$tmp/err" || fail "SLUICE_CLOCK=monotonic sluice version failed"
grep -Eqx 'clock: CLOCK_MONOTONIC(_COARSE)?' "$tmp/mono" ||
    fail "SLUICE_CLOCK=monotonic: sluice version says '$(cat "$tmp/mono")'"
cp "$tmp/out" "$tmp/version"

# --version and -V are the version command
for flag in --version -V; do
    "$SLUICE_BIN" "$flag" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 0 ]] || fail "sluice $flag exited $rc, want 0: $(cat "$tmp/err")"
    cmp -s "$tmp/version" "$tmp/out" || fail "sluice $flag printed '$(cat "$tmp/out")', not what version prints"
    [[ -s "$tmp/err" ]] && fail "sluice $flag wrote to stderr: $(cat "$tmp/err")"
    "$SLUICE_BIN" "$flag" extra >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 ]] || fail "sluice $flag extra exited $rc, want 2"
done

cli_test_end
