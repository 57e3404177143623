#!/usr/bin/env bash
# test_demo.sh: `sluice demo` prints exactly the text below, and the CLI's
# exit codes hold (help: 0, unknown command: 2, usage on stderr).
# ctest sets SLUICE_BIN to the built sluice binary.
#
# The expected text replays the seed design's Main with sluice. Where sluice's
# exact semantics differ from the seed's Java, the output says so in "# " lines.
# The per-key part (alice, alice, alice, bob; tracked keys; the exhaustive
# switch on alice) runs on a memory store with a manual clock, as the seed's
# PerKeyLimiter: token-bucket capacity=2 rate=1/s, every request at t=0.
set -u

. "$(dirname "$0")/cli_test.sh" test_demo

# ---- sluice demo: the whole stdout ----

cat >"$tmp/expected" <<'EOF'
t=0     Allowed[remaining=2]
t=0     Allowed[remaining=1]
t=0     Allowed[remaining=0]
t=0     Denied[retryAfterMs=1000]
t=500   Denied[retryAfterMs=500]
t=1000  Allowed[remaining=0]
t=61000 Allowed[remaining=0] (refill is capped at capacity)
rejected: cost 5 is outside 1..3
rejected: capacity 0 is outside 1..1000000000
t=900   Allowed[remaining=0]
t=1000  Denied[retryAfterMs=100]
# the seed prints retryAfterMs=1000 here: its hint is the next window boundary.
# sluice gives the exact earliest retry: at t=1100 the previous window's 10 weigh
# 10*900/1000 = 9, and 9 + 1 <= 10.
t=1500  Allowed[remaining=0]
t=1500  Denied[retryAfterMs=100]
# the seed prints retryAfterMs=500 here (the next boundary); at t=1600 the previous
# window weighs 10*400/1000 = 4, and 4 + 5 + 1 <= 10.
# the seed also floors the previous window's weight, prev*(W-e)/W, so it can admit
# what the estimate refuses (9.5 + 1 taken as 9 + 1 <= 10); sluice compares the
# exact rational prev*(W-e) + (cur+n)*W <= L*W. Here the weights are whole, so
# the decisions agree.
allowed at t=999: 10, at t=1000: 10, within 1 ms: 20
alice: Allowed[remaining=1]
alice: Allowed[remaining=0]
alice: Denied[retryAfterMs=1000]
bob: Allowed[remaining=1]
tracked keys: 2
wait 1000 ms
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
