#!/usr/bin/env bash
# test_simulate.sh: `sluice simulate SPEC [--store URL] [--allow-backwards]`
# replays a trace "TIME_MS KEY [COST]" from stdin and prints one exact line
# per request (or a JSON object, --json), or a summary (--summary), and can
# draw the run (--svg FILE, checked with python3's xml.etree). The expected lines below are computed by hand from
# docs/semantics.md (the reasoning is written out for several of them), not
# copied from the program.
# ctest sets SLUICE_BIN to the built sluice binary.
set -u

. "$(dirname "$0")/cli_test.sh" test_simulate

# sim ARGS...: runs `sluice simulate ARGS` with $tmp/in on stdin; sets rc,
# $tmp/out and $tmp/err.
sim() {
    "$SLUICE_BIN" simulate "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# ok NAME ARGS...: the run exits 0 and prints exactly $tmp/want.
ok() {
    local name=$1
    shift
    sim "$@"
    if [[ $rc -ne 0 ]]; then
        fail "$name: exited $rc, want 0; stderr:"
        cat "$tmp/err" >&2
    fi
    if ! cmp -s "$tmp/want" "$tmp/out"; then
        fail "$name: stdout differs (- expected, + actual):"
        diff -u "$tmp/want" "$tmp/out" | head -40 | cat -v >&2
    fi
}

# bad NAME LINE PATTERN ARGS...: the run exits 2, prints exactly $tmp/want
# (the lines before the bad one), and stderr names "line LINE:" and matches
# the extended regex PATTERN.
bad() {
    local name=$1 line=$2 pattern=$3
    shift 3
    sim "$@"
    [[ $rc -eq 2 ]] || fail "$name: exited $rc, want 2"
    if ! cmp -s "$tmp/want" "$tmp/out"; then
        fail "$name: stdout differs (- expected, + actual):"
        diff -u "$tmp/want" "$tmp/out" | head -40 | cat -v >&2
    fi
    grep -q "^sluice simulate: line $line: " "$tmp/err" || fail "$name: stderr does not name line $line: $(cat -v "$tmp/err")"
    grep -Eq -- "$pattern" "$tmp/err" || fail "$name: stderr does not match /$pattern/: $(cat -v "$tmp/err")"
}

# ---- token bucket ----------------------------------------------------------
# capacity C=2, R=1 per P=1000 ms: g=1, r=1 (a ms is 1 unit), p=1000 (a token
# is 1000 units), tau = C*p = 2000. TAT starts at -inf.
#  t=0 alice:  b=0; 0+1000 <= 2000 admit, TAT=1000; b'=1000: remaining
#              floor((2000-1000)/1000)=1, reset ceil(1000/1)=1000.
#  t=0 alice:  b=1000; 2000 <= 2000 admit, TAT=2000; remaining 0, reset 2000.
#  t=0 alice:  b=2000; 3000 > 2000 deny: retry ceil(1000/1)=1000, remaining
#              floor(0/1000)=0, reset 2000.
#  t=500 alice: b=2000-500=1500; 2500 > 2000 deny: retry 500, remaining
#              floor(500/1000)=0, reset 1500.
#  t=500 bob 2: a fresh key: b=0; 2000 <= 2000 admit; remaining 0, reset 2000.
#  t=1500 alice: b=500; 1500 <= 2000 admit, TAT=3000; b'=1500: remaining 0,
#              reset 1500.
cat >"$tmp/in" <<'EOF'
0 alice
0 alice
0 alice
500 alice
500 bob 2
1500 alice
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=alice cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=alice cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=0 key=alice cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=2000 delay_ms=0
t=500 key=alice cost=1 allowed=0 remaining=0 retry_after_ms=500 reset_ms=1500 delay_ms=0
t=500 key=bob cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=1500 key=alice cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1500 delay_ms=0
EOF
ok "token bucket" 'token-bucket capacity=2 rate=1/s'
grep -qx '# 6 requests, 4 allowed, 2 denied, 2 keys held' "$tmp/err" ||
    fail "token bucket: summary on stderr is '$(cat "$tmp/err")'"

# Scaled units: C=2, R=3 per P=1000: g=1, r=3, p=1000, tau=2000.
#  t=0 a 2:  ts=0, b=0; 2000 <= 2000 admit, TAT=2000; remaining 0,
#            reset ceil(2000/3)=667.
#  t=1 a:    ts=3, b=1997; 2997 > 2000 deny: retry ceil(997/3)=333 (so t=334),
#            remaining 0, reset ceil(1997/3)=666.
#  t=333 a:  ts=999, b=1001; 2001 > 2000 deny: retry ceil(1/3)=1, reset
#            ceil(1001/3)=334 (one ms before the retry time: still denied).
#  t=334 a:  ts=1002, b=998; 1998 <= 2000 admit, TAT=3000; b'=1998: remaining
#            floor(2/1000)=0, reset ceil(1998/3)=666.
# The same numbers hold for "gcra rate=3/s burst=2", the same bucket.
cat >"$tmp/in" <<'EOF'
0 a 2
1 a
333 a
334 a
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=667 delay_ms=0
t=1 key=a cost=1 allowed=0 remaining=0 retry_after_ms=333 reset_ms=666 delay_ms=0
t=333 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1 reset_ms=334 delay_ms=0
t=334 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=666 delay_ms=0
EOF
ok "token bucket, 3/s" 'token-bucket capacity=2 rate=3/s'
ok "gcra" 'gcra rate=3/s burst=2'

# ---- leaky bucket ----------------------------------------------------------
# capacity 2, 1/s: the token bucket's numbers, plus delay = ceil(b/r) for an
# admitted request (the work queued ahead of it).
#  t=0:       b=0 admit, delay 0; TAT=1000, remaining 1, reset 1000.
#  t=0:       b=1000 admit, delay 1000; TAT=2000, remaining 0, reset 2000.
#  t=0:       b=2000, 3000 > 2000 deny: retry 1000, delay 0.
#  t=1500:    b=500 admit, delay 500; TAT=3000, b'=1500: remaining 0, reset 1500.
#  t=3000 2:  b=0; 2000 <= 2000 admit, delay 0; remaining 0, reset 2000.
cat >"$tmp/in" <<'EOF'
0 q
0 q
0 q
1500 q
3000 q 2
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=q cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=q cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=1000
t=0 key=q cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=2000 delay_ms=0
t=1500 key=q cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1500 delay_ms=500
t=3000 key=q cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
EOF
ok "leaky bucket" 'leaky-bucket capacity=2 rate=1/s'

# ---- fixed window ----------------------------------------------------------
# L=3, W=1000: windows [0,1000), [1000,2000), ...
#  t=900 a:    window 0, count 0 -> 1: remaining 2, reset 1000-900=100.
#  t=950 a 2:  1+2 <= 3 -> 3: remaining 0, reset 50.
#  t=999 a:    3+1 > 3 deny: retry 1000-999=1, reset 1.
#  t=1000 a 3: window 1, count 0 -> 3: remaining 0, reset 1000.
#  t=1000 b:   a fresh key: window 1, 0 -> 1: remaining 2, reset 1000.
#  t=2500 a:   window 2: count 0 -> 1: remaining 2, reset 3000-2500=500.
cat >"$tmp/in" <<'EOF'
900 a
950 a 2
999 a
1000 a 3
1000 b
2500 a
EOF
cat >"$tmp/want" <<'EOF'
t=900 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=100 delay_ms=0
t=950 key=a cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=50 delay_ms=0
t=999 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1 reset_ms=1 delay_ms=0
t=1000 key=a cost=3 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=1000 key=b cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=2500 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=500 delay_ms=0
EOF
ok "fixed window" 'fixed-window limit=3 window=1s'

# ---- sliding window counter ------------------------------------------------
# L=4, W=1000. Admit n iff P*(W-e) + (C+n)*W <= L*W.
#  t=0 a 4:    K=0, e=0, P=0, C=0: 4000 <= 4000 admit -> (0, 0, 4).
#              remaining max(0, 4-4-0)=0; reset (K+2)*W - t = 2000.
#  t=500 a:    K=0, e=500: 0 + 5000 > 4000 deny. In window 0 it never fits
#              (P=0, C+n=5 > 4). In window 1 the 4 are the previous count:
#              4*(1000-e2) + 1000 <= 4000 <=> e2 >= 250: A=1250, retry 750.
#              remaining 0; reset 2000-500=1500.
#  t=1250 a:   K=1: (P, C) = (4, 0), e=250: 4*750 + 1000 = 4000 admit ->
#              (1, 4, 1). remaining max(0, 4-1-ceil(3000/1000)) = 0;
#              reset (1+2)*1000-1250 = 1750.
#  t=1500 a 2: e=500: 4*500 + 3*1000 = 5000 > 4000 deny. In window 1:
#              4*(1000-e) <= (4-1-2)*1000 <=> e >= 750: A=1750, retry 250.
#              remaining max(0, 4-1-ceil(2000/1000)) = 1; reset 3000-1500.
#  t=1750 a 2: e=750: 4*250 + 3000 = 4000 admit -> (1, 4, 3). remaining
#              max(0, 4-3-ceil(1000/1000)) = 0; reset 3000-1750 = 1250.
cat >"$tmp/in" <<'EOF'
0 a 4
500 a
1250 a
1500 a 2
1750 a 2
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=4 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=500 key=a cost=1 allowed=0 remaining=0 retry_after_ms=750 reset_ms=1500 delay_ms=0
t=1250 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1750 delay_ms=0
t=1500 key=a cost=2 allowed=0 remaining=1 retry_after_ms=250 reset_ms=1500 delay_ms=0
t=1750 key=a cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1250 delay_ms=0
EOF
ok "sliding window" 'sliding-window limit=4 window=1s'

# ---- sliding log -----------------------------------------------------------
# L=3, W=1000: used = what was admitted at ts > t-1000.
#  t=0, 400, 700: used 0, 1, 2 -> admitted; remaining 2, 1, 0; reset
#              newest+1000-t = 1000 each time.
#  t=800:      used 3, deny. Entries (0,1) (400,1) (700,1): dropping the
#              first leaves 2 + 1 <= 3, so A = 0+1000: retry 200;
#              reset 700+1000-800 = 900.
#  t=1000 2:   used = entries after 0: 2; 2+2 > 3 deny. Dropping (0) leaves
#              2+2 > 3, dropping (400) too leaves 1+2 <= 3: A = 400+1000,
#              retry 400; remaining 3-2 = 1; reset 700+1000-1000 = 700.
#  t=1400 2:   used = entries after 400: 1; 1+2 <= 3 admit (1400,2);
#              remaining 0; reset 1000.
cat >"$tmp/in" <<'EOF'
0 a
400 a
700 a
800 a
1000 a 2
1400 a 2
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=400 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=700 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=800 key=a cost=1 allowed=0 remaining=0 retry_after_ms=200 reset_ms=900 delay_ms=0
t=1000 key=a cost=2 allowed=0 remaining=1 retry_after_ms=400 reset_ms=700 delay_ms=0
t=1400 key=a cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
ok "sliding log" 'sliding-log limit=3 window=1s'

# ---- composite -------------------------------------------------------------
# fixed-window L=2 W=1000 and leaky-bucket C=5 at 1/s (tau=5000). Admitted
# iff both admit; remaining = least, retry/reset/delay = greatest.
#  t=999:  FW 0->1 (rem 1, reset 1); LB b=0 (rem 4, reset 1000, delay 0).
#          -> remaining 1, reset 1000, delay 0.
#  t=999:  FW 1->2 (rem 0, reset 1); LB b=1000 (rem 3, reset 2000, delay 1000).
#  t=999:  FW denies (retry 1, reset 1); LB would admit and reports its state
#          as it is: rem 3, retry 0, reset 2000. -> denied, remaining 0,
#          retry 1, reset 2000, delay 0 (a denial).
#  t=1000: FW window 1: 0->1 (rem 1, reset 1000); LB TAT=2999, b=1999, admit:
#          delay 1999, b'=2999: rem floor(2001/1000)=2, reset 2999.
cat >"$tmp/in" <<'EOF'
999 a
999 a
999 a
1000 a
EOF
cat >"$tmp/want" <<'EOF'
t=999 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=999 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=1000
t=999 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1 reset_ms=2000 delay_ms=0
t=1000 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=2999 delay_ms=1999
EOF
ok "composite" 'fixed-window limit=2 window=1s; leaky-bucket capacity=5 rate=1/s'

# ---- verb lines: peek, refund, reset ----------------------------------------
# token-bucket C=2 at 1/s (p=1000, tau=2000), as above. A verb line prints
# the request line's fields with verb= after the key and cost= its COST; a
# peek is the decision a request of COST would get (nothing consumed), a
# refund or reset that of a request of cost 1 right after
# (docs/semantics.md, "Peek, refund, reset").
#  t=0 a:          b=0 admit, TAT=1000: remaining 1, reset 1000.
#  t=0 a peek 2:   b=1000; 1000+2000 > 2000 deny: retry 1000, remaining 1,
#                  reset 1000; TAT stays 1000.
#  t=0 a peek:     b=1000; 2000 <= 2000 admit: remaining 0, reset 2000.
#  t=0 a:          the same, made: TAT=2000 (so the peek consumed nothing).
#  t=0 a:          b=2000: denied, retry 1000, reset 2000.
#  t=0 a refund 1: TAT > ts: TAT = max(2000-1000, 0) = 1000; then a request
#                  of cost 1 would get remaining 0, reset 2000 (admitted).
#  t=0 a:          b=1000: admitted (the refund gave one back): TAT=2000.
#  t=500 a refund 2: TAT = max(2000-2000, 500) = 500 (not below the
#                  reading: a full bucket); cost 1: b=0 -> remaining 1,
#                  reset 1000.
#  t=500 a 2:      b=0: 2000 <= 2000 admit, TAT=2500: remaining 0, reset 2000.
#  t=500 a reset:  fresh: remaining 1, reset 1000.
#  t=600 b peek 2: b is never seen: a fresh state: admit, remaining 0,
#                  reset 2000; nothing is created.
#  t=600 b refund 1: not held: nothing changes; cost 1 on fresh: remaining
#                  1, reset 1000.
#  t=700 a:        fresh since the reset: remaining 1, reset 1000 (without
#                  it, b=1800 would deny).
cat >"$tmp/in" <<'EOF'
0 a
0 a peek 2
0	a	peek   # COST 1
0 a
0 a
0 a refund 1
0 a
500 a refund 2
500 a 2
500 a reset
600 b peek 2
600 b refund 1
700 a
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=a verb=peek cost=2 allowed=0 remaining=1 retry_after_ms=1000 reset_ms=1000 delay_ms=0
t=0 key=a verb=peek cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=0 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=2000 delay_ms=0
t=0 key=a verb=refund cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=500 key=a verb=refund cost=2 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=500 key=a cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=500 key=a verb=reset cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=600 key=b verb=peek cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=600 key=b verb=refund cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=700 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
ok "verb lines" 'token-bucket capacity=2 rate=1/s'
# verb lines are not requests: 6 requests; b (verb lines only) is never held
grep -qx '# 6 requests, 5 allowed, 1 denied, 1 keys held; 3 peeks, 3 refunds, 1 resets' "$tmp/err" ||
    fail "verb lines: summary on stderr is '$(cat "$tmp/err")'"
cp "$tmp/in" "$tmp/verbs.in"
# A reset is made at the line's time (the manual clock is set to it): a
# window's reset after it counts from there. fixed-window L=2 W=1000:
#  t=1500 a, a: window 1 used up.  t=1700 a reset: fresh; cost 1 would
#  leave 1, reset 2000-1700 = 300.  t=1700 a: admitted, remaining 1.
printf '1500 a\n1500 a\n1700 a reset\n1700 a\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
t=1500 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=500 delay_ms=0
t=1500 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=500 delay_ms=0
t=1700 key=a verb=reset cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=300 delay_ms=0
t=1700 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=300 delay_ms=0
EOF
ok "reset at the line's time" 'fixed-window limit=2 window=1s'

# ---- shadow parts: shadow_denied=1 -------------------------------------------
# fixed-window L=3 W=1000, and a shadow fixed window L=1 that never denies
# but says when it would have (it counts what it would itself admit of an
# admitted request; docs/semantics.md, "Shadow parts"):
#  t=0:      FW 0->1 rem 2, reset 1000; the shadow 0->1, admits.
#  t=0:      FW 1->2 rem 1; the shadow would deny: shadow_denied=1.
#  t=0 peek: FW 2+1 <= 3: rem 0; the shadow would deny.
#  t=0:      FW 2->3 rem 0; the shadow would deny.
#  t=0:      FW denies (retry 1000); the shadow would too: shadow_denied
#            whether admitted or not.
#  t=1000:   new windows for both: rem 2, nothing denied.
printf '0 a\n0 a\n0 a peek\n0 a\n0 a\n1000 a\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0 shadow_denied=1
t=0 key=a verb=peek cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0 shadow_denied=1
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0 shadow_denied=1
t=0 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=1000 delay_ms=0 shadow_denied=1
t=1000 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
SH='fixed-window limit=3 window=1s; shadow fixed-window limit=1 window=1s'
ok "shadow part" "$SH"
grep -qx '# 5 requests, 4 allowed, 1 denied, 1 keys held, 3 shadow denied; 1 peeks, 0 refunds, 0 resets' "$tmp/err" ||
    fail "shadow part: summary on stderr is '$(cat "$tmp/err")'"
cp "$tmp/in" "$tmp/shadow.in"

# ---- the input format: comments, blank lines, tabs, default cost, CRLF ------
printf '# a trace\n\n   \t \n0 a # the first\n0\ta\t1\n  0   a  #x\n0 a#no space before the comment\n# 0 a\n0 b 1\r\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=2000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=3000 delay_ms=0
t=0 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=3000 delay_ms=0
t=0 key=b cost=1 allowed=1 remaining=2 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
ok "format" 'token-bucket capacity=3 rate=1/s'
grep -qx '# 5 requests, 4 allowed, 1 denied, 2 keys held' "$tmp/err" ||
    fail "format: summary on stderr is '$(cat "$tmp/err")'"

# Negative times are clock readings too (windows floor: [-1000, 0)).
printf -- '-1 a\n-1 a\n0 a\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
t=-1 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1 delay_ms=0
t=-1 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1 reset_ms=1 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
ok "negative times" 'fixed-window limit=1 window=1s'

# An empty trace: nothing on stdout, exit 0.
: >"$tmp/in"
: >"$tmp/want"
ok "empty trace" 'token-bucket capacity=3 rate=1/s'
grep -qx '# 0 requests, 0 allowed, 0 denied, 0 keys held' "$tmp/err" ||
    fail "empty trace: summary on stderr is '$(cat "$tmp/err")'"

# ---- binary-ish keys: bytes as given, printed as given ---------------------
# "a\0b" and "a" are different keys (NUL bytes are key bytes); so are
# "x=y", "\x01\xff", a UTF-8 key and "\\n" (a backslash and an n: no escapes).
printf '0 a\0b\n0 a\0b\n0 a\n0 x=y\n0 \001\377\n0 \320\272\320\273\321\216\321\207\n0 \\n\n0 \001\377\n' >"$tmp/in"
printf '%s\n' \
    't=0 key=a\0b cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=a\0b cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0' \
    't=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=x=y cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=\001\377 cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=\320\272\320\273\321\216\321\207 cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=\\n cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' \
    't=0 key=\001\377 cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0' |
    while IFS= read -r l; do printf "$l\n"; done >"$tmp/want"
ok "binary keys" 'token-bucket capacity=2 rate=1/s'
grep -qx '# 8 requests, 8 allowed, 0 denied, 6 keys held' "$tmp/err" ||
    fail "binary keys: summary on stderr is '$(cat "$tmp/err")'"

# A key of SLUICE_KEY_MAX = 512 bytes is a key; 513 bytes is a bad line.
k512=$(printf 'k%.0s' $(seq 512))
printf '0 %s\n0 %sk\n' "$k512" "$k512" >"$tmp/in"
printf 't=0 key=%s cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=1000 delay_ms=0\n' "$k512" >"$tmp/want"
bad "key of 513 bytes" 2 '513 bytes' 'token-bucket capacity=1 rate=1/s'

# ---- time going backwards --------------------------------------------------
cat >"$tmp/in" <<'EOF'
0 a
1000 a
# the store has seen 1000 now
500 a
400 a
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=1000 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
bad "decreasing time" 4 'time 500 is before 1000 \(line 2\)' 'token-bucket capacity=2 rate=1/s'

# With --allow-backwards the store's time stands still at 1000 (the highest
# so far): t=500 and t=400 decide as t=1000 would, and their waits count
# from their own t, so that waiting them is exactly enough (sluice.h):
#  t=500 (as 1000): b=1000 admit, TAT=3000: remaining 0, reset 2000 from
#                   1000, so 2500 from t=500.
#  t=400 (as 1000): b=2000 deny: retry 1000 and reset 2000 from 1000, so
#                   1600 and 2600 from t=400.
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=1000 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=500 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2500 delay_ms=0
t=400 key=a cost=1 allowed=0 remaining=0 retry_after_ms=1600 reset_ms=2600 delay_ms=0
EOF
ok "--allow-backwards" 'token-bucket capacity=2 rate=1/s' --allow-backwards
# ... and equal to the same trace with the times raised to the highest so
# far, once every wait is told as the instant it ends (t + wait).
cp "$tmp/out" "$tmp/backwards"
printf '0 a\n1000 a\n1000 a\n1000 a\n' >"$tmp/in"
sim 'token-bucket capacity=2 rate=1/s'
ends() { # the waits of each line as the instants they end
    awk '{ split($1, t, "="); for (i = 2; i <= NF; i++) { split($i, kv, "=");
             if ((kv[1] == "retry_after_ms" || kv[1] == "reset_ms") && kv[2] > 0) kv[2] += t[2];
             printf "%s=%s ", kv[1], kv[2] } print "" }' "$1"
}
ends "$tmp/backwards" >"$tmp/b1"
ends "$tmp/out" >"$tmp/b2"
cmp -s "$tmp/b1" "$tmp/b2" || fail "--allow-backwards: decisions differ from those at the highest time so far"
# The option may come first, and so may --store.
printf '0 a\n1000 a\n500 a\n400 a\n' >"$tmp/in"
cp "$tmp/backwards" "$tmp/want"
ok "options first" --allow-backwards --store memory: 'token-bucket capacity=2 rate=1/s'
ok "--store=URL" --store=memory: 'token-bucket capacity=2 rate=1/s' --allow-backwards
# A shaper's delay is a wait too: leaky-bucket capacity=2 rate=1/s (one
# request drains per second).
#  t=1000: an empty queue: admitted at once, 1 queued: reset 1000.
#  t=0 (as 1000): 1 ahead of it: admitted, delay 1000 and reset 2000 from
#                 1000, so 2000 and 3000 from t=0.
printf '1000 a\n0 a\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
t=1000 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
t=0 key=a cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=3000 delay_ms=2000
EOF
ok "--allow-backwards, a shaper's delay" 'leaky-bucket capacity=2 rate=1/s' --allow-backwards

# Every kind of bad line: exit 2, the line named (physical line numbers:
# comments and blank lines count), the lines before it printed, none after.
printf '# header\n\n0 a\n' >"$tmp/head"
cat >"$tmp/want" <<'EOF'
t=0 key=a cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0
EOF
badline() { # NAME LINE_TEXT PATTERN
    { cat "$tmp/head"; printf '%s\n' "$2"; printf '5000 a\n'; } >"$tmp/in"
    bad "$1" 4 "$3" 'token-bucket capacity=2 rate=1/s'
}
badline "time not a number" 'x a' 'time "x" is not an integer'
badline "time with a unit" '10ms a' 'time "10ms" is not an integer'
badline "time with a plus" '+10 a' 'time "\+10" is not an integer'
badline "time a lone minus" '- a' 'time "-" is not an integer'
badline "time above the range" '2305843009213693953 a' 'outside the accepted range'
badline "time below the range" '-2305843009213693953 a' 'outside the accepted range'
badline "time beyond int64" '99999999999999999999999 a' 'outside the accepted range'
badline "missing key" '10' 'missing KEY'
badline "missing key, comment" '10 # a' 'missing KEY'
badline "cost zero" '10 a 0' 'cost "0" is not a positive integer'
badline "cost negative" '10 a -1' 'cost "-1" is not a positive integer'
badline "cost not a number" '10 a 2x' 'cost "2x" is not a positive integer'
badline "neither a cost nor a verb" '10 a two' 'verb "two" is unknown: expected peek, refund or reset, or a COST'
badline "cost fraction" '10 a 1.5' 'cost "1.5" is not a positive integer'
badline "cost beyond int64" '10 a 99999999999999999999' 'not a positive integer'
badline "a fourth field" '10 a 1 more' 'more than 3 fields'
badline "cost above the limit" '10 a 3' 'SLUICE_ECOST.*above 2'
badline "decreasing" '-1 a' 'time -1 is before 0 \(line 3\)'
badline "unknown verb" '10 a peak' 'verb "peak" is unknown: expected peek, refund or reset'
badline "a verb in capitals" '10 a PEEK' 'verb "PEEK" is unknown'
badline "refund without COST" '10 a refund' 'missing COST: how much to give back \(expected TIME_MS KEY refund COST\)'
badline "refund without COST, comment" '10 a refund # 2' 'missing COST'
badline "reset with a COST" '10 a reset 1' 'reset takes no COST'
badline "peek cost zero" '10 a peek 0' 'cost "0" is not a positive integer'
badline "refund cost negative" '10 a refund -1' 'cost "-1" is not a positive integer'
badline "refund cost not a number" '10 a refund x' 'cost "x" is not a positive integer'
badline "a fifth field" '10 a peek 1 more' 'more than 4 fields'
badline "peek above the limit" '10 a peek 3' 'key "a" peek cost 3: SLUICE_ECOST.*above 2'
badline "refund above the limit" '10 a refund 3' 'key "a" refund cost 3: SLUICE_ECOST.*above 2'
badline "a verb line back in time" '-1 a reset' 'time -1 is before 0 \(line 3\)'
# a verb line's time counts too: a request may not go back before it
printf '10 a peek\n5 a\n' >"$tmp/in"
echo 't=10 key=a verb=peek cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0' >"$tmp/want"
bad "back in time after a verb line" 2 'time 5 is before 10 \(line 1\)' 'token-bucket capacity=2 rate=1/s'
# the range's ends are accepted
printf -- '-2305843009213693952 a\n2305843009213693952 a\n' >"$tmp/in"
sim 'token-bucket capacity=2 rate=1/s'
[[ $rc -eq 0 && $(wc -l <"$tmp/out") -eq 2 ]] || fail "the ends of the time range: exit $rc, $(cat "$tmp/err")"

# A bad line is reported even when it is the first.
printf 'oops\n0 a\n' >"$tmp/in"
: >"$tmp/want"
bad "first line bad" 1 'time "oops"' 'token-bucket capacity=2 rate=1/s'

# ---- bad SPEC, bad options, bad store URL -----------------------------------
: >"$tmp/in"
bad_args() { # NAME PATTERN ARGS...: exit 2, nothing on stdout, PATTERN on stderr
    local name=$1 pattern=$2
    shift 2
    sim "$@"
    [[ $rc -eq 2 ]] || fail "$name: exited $rc, want 2"
    [[ -s "$tmp/out" ]] && fail "$name: wrote to stdout"
    grep -Eq -- "$pattern" "$tmp/err" || fail "$name: stderr does not match /$pattern/: $(cat "$tmp/err")"
}
bad_args "bad SPEC" 'bad SPEC: at 24: unknown parameter' 'token-bucket capacity=2 rat=1/s'
grep -qx '                          \^' "$tmp/err" || fail "bad SPEC: no caret under position 24: $(cat "$tmp/err")"
bad_args "bad SPEC value" 'bad SPEC: at [0-9]+: ' 'token-bucket capacity=0 rate=1/s'
bad_args "bad SPEC part" 'bad SPEC: at [0-9]+: ' 'fixed-window limit=1 window=1s; nosuch x=1'
bad_args "empty SPEC" 'bad SPEC' ''
bad_args "no SPEC" 'missing SPEC'
bad_args "two SPECs" "unexpected argument" 'fixed-window limit=1 window=1s' 'fixed-window limit=2 window=1s'
bad_args "unknown option" "unknown option '--nosuch'" 'fixed-window limit=1 window=1s' --nosuch
bad_args "--store without URL" '--store needs a URL' 'fixed-window limit=1 window=1s' --store
bad_args "unknown scheme" 'scheme "nosuch" is unknown' 'fixed-window limit=1 window=1s' --store nosuch:
bad_args "no scheme" 'has no scheme' 'fixed-window limit=1 window=1s' --store memory
bad_args "unknown store parameter" 'parameter "bogus" is unknown' 'fixed-window limit=1 window=1s' --store 'memory:?bogus=1'
bad_args "bad max_keys" 'max_keys=x: expected an integer' 'fixed-window limit=1 window=1s' --store 'memory:?max_keys=x'
bad_args "bad on_full" 'on_full=never: expected evict or refuse' 'fixed-window limit=1 window=1s' --store 'memory:?on_full=never'

# ---- a full store that refuses: SLUICE_EFULL on the second key's line ------
# One key of room; at 1 per hour neither key becomes fresh (forgettable) in
# the trace's time, so the second key is refused.
cat >"$tmp/in" <<'EOF'
0 first
1000 first
2000 second
3000 first
EOF
cat >"$tmp/want" <<'EOF'
t=0 key=first cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=3600000 delay_ms=0
t=1000 key=first cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=7199000 delay_ms=0
EOF
bad "EFULL" 3 'key "second" cost 1: SLUICE_EFULL: store is full' \
    'token-bucket capacity=2 rate=1/h' --store 'memory:?max_keys=1&on_full=refuse'
# The same with on_full=evict (the default): the second key evicts the first,
# which comes back fresh.
cat >>"$tmp/want" <<'EOF'
t=2000 key=second cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=3600000 delay_ms=0
t=3000 key=first cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=3600000 delay_ms=0
EOF
ok "evict" 'token-bucket capacity=2 rate=1/h' --store 'memory:?max_keys=1'
grep -qx '# 4 requests, 4 allowed, 0 denied, 1 keys held' "$tmp/err" ||
    fail "evict: summary on stderr is '$(cat "$tmp/err")'"

# ---- help -------------------------------------------------------------------
"$SLUICE_BIN" simulate --help >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] || fail "simulate --help exited $rc"
[[ -s "$tmp/err" ]] && fail "simulate --help wrote to stderr"
for want in '^usage: sluice simulate \[SPEC \| --policy SPEC\]' 'TIME_MS KEY \[COST\]' 'TIME_MS KEY peek \[COST\]' \
    'TIME_MS KEY refund COST' 'TIME_MS KEY reset' 'shadow_denied=1' 'peeks=P refunds=R resets=Z' '--allow-backwards' \
    '--store URL' '^example:'; do
    grep -Eq -- "$want" "$tmp/out" || fail "simulate --help lacks /$want/"
done
# The help's example is true: run it and compare with the lines it shows.
sed -n '/^example:/,$p' "$tmp/out" >"$tmp/example"
printf '0 alice\n0 alice\n0 alice  # a third at once\n500 alice\n500 bob 2\n' >"$tmp/in"
grep -q "printf '0 alice\\\\n0 alice\\\\n0 alice  # a third at once\\\\n500 alice\\\\n500 bob 2\\\\n'" "$tmp/example" ||
    fail "simulate --help: the example's input is not the one this test runs"
grep '^  t=' "$tmp/example" | sed 's/^  //' >"$tmp/want"
ok "the help's example" 'token-bucket capacity=2 rate=1/s'
grep '^  # ' "$tmp/example" | sed 's/^  //' | cmp -s - "$tmp/err" || fail "the help's example: summary differs"
"$SLUICE_BIN" help | grep -q '^  simulate ' || fail "sluice help does not list simulate"

# ---- a larger generated trace: self-consistency ------------------------------
# 20 keys, 4000 requests; "hot" gets 300 requests at a frozen t=5000 among
# the others. For each algorithm with limit 50: exactly 50 of hot's are
# allowed (a frozen clock gives nothing back), hot's remaining counts down
# 49..0, and each key decides as if alone (the same lines when its requests
# are replayed by themselves).
awk 'BEGIN {
    srand(7); t = 0
    for (i = 0; i < 1800; i++) {   # up to t=5000, others only
        printf "%d k%d %d\n", t, int(rand() * 19), 1 + int(rand() * 3)
        t += int(rand() * 5); if (t > 5000) t = 5000
    }
    for (i = 0; i < 300; i++) {    # the clock stands at 5000: hot among others
        print "5000 hot"
        printf "5000 k%d %d\n", int(rand() * 19), 1 + int(rand() * 3)
    }
    t = 5000
    for (i = 0; i < 1600; i++) {   # after 5000, others only
        t += int(rand() * 5)
        printf "%d k%d %d\n", t, int(rand() * 19), 1 + int(rand() * 3)
    }
}' >"$tmp/gen"
sort -n -s -k1,1 "$tmp/gen" | cmp -s - "$tmp/gen" || fail "generated trace: times decrease (a bug in this test)"
n_lines=$(wc -l <"$tmp/gen")
for spec in 'token-bucket capacity=50 rate=1/s' 'leaky-bucket capacity=50 rate=1/s' \
    'fixed-window limit=50 window=1h' 'sliding-window limit=50 window=1s' \
    'sliding-log limit=50 window=1s' 'gcra rate=10/s burst=50; fixed-window limit=80 window=1h'; do
    cp "$tmp/gen" "$tmp/in"
    sim "$spec"
    if [[ $rc -ne 0 ]]; then
        fail "generated, $spec: exited $rc: $(cat "$tmp/err")"
        continue
    fi
    [[ $(wc -l <"$tmp/out") -eq $n_lines ]] || fail "generated, $spec: $(wc -l <"$tmp/out") lines for $n_lines requests"
    hot_allowed=$(grep -c '^t=5000 key=hot .* allowed=1 ' "$tmp/out")
    [[ $hot_allowed -eq 50 ]] || fail "generated, $spec: $hot_allowed of hot's 300 allowed, want 50"
    grep '^t=5000 key=hot .* allowed=1 ' "$tmp/out" | sed 's/.* remaining=\([0-9]*\) .*/\1/' >"$tmp/rem"
    seq 49 -1 0 | cmp -s - "$tmp/rem" || fail "generated, $spec: hot's remaining does not count down 49..0"
    allowed=$(grep -c ' allowed=1 ' "$tmp/out")
    grep -qx "# $n_lines requests, $allowed allowed, $((n_lines - allowed)) denied, 20 keys held" "$tmp/err" ||
        fail "generated, $spec: summary '$(cat "$tmp/err")' (allowed lines: $allowed)"
    cp "$tmp/out" "$tmp/gen.out"
    for key in hot k0 k7 k18; do
        grep -E " $key( |$)" "$tmp/gen" >"$tmp/in"
        grep " key=$key " "$tmp/gen.out" >"$tmp/want"
        ok "generated, $spec, $key alone" "$spec"
    done
done
# The sliding log never admits more than 50 in any 1000 consecutive ms, for
# any key (checked over the allowed lines; costs count).
cp "$tmp/gen" "$tmp/in"
sim 'sliding-log limit=50 window=1s'
awk '/ allowed=1 / {
    t = substr($1, 3) + 0; k = substr($2, 5); c = substr($3, 6) + 0
    n[k]++; ts[k, n[k]] = t; cs[k, n[k]] = c
    sum = 0
    for (i = n[k]; i >= 1 && ts[k, i] > t - 1000; i--) sum += cs[k, i]
    if (sum > 50) { print "key " k " has " sum " within 1000 ms at t=" t; bad = 1 }
} END { exit bad }' "$tmp/out" >"$tmp/viol" || fail "sliding log: $(head -3 "$tmp/viol")"

# ---- --policy SPEC, as every other command takes it ---------------------------
printf '0 alice\n0 alice\n0 alice\n500 alice\n500 bob 2\n1500 alice\n' >"$tmp/in"
sim 'token-bucket capacity=2 rate=1/s'
cp "$tmp/out" "$tmp/want"
ok "--policy SPEC" --policy 'token-bucket capacity=2 rate=1/s'
ok "--policy=SPEC" --store memory: --policy='token-bucket capacity=2 rate=1/s'
: >"$tmp/in"
bad_args "SPEC and --policy" 'SPEC is given twice' 'fixed-window limit=1 window=1s' --policy 'fixed-window limit=1 window=1s'
bad_args "--policy without SPEC" '--policy needs a value' --policy
bad_args "--policy, a bad SPEC" 'bad SPEC: at 0: unknown algorithm "fixd-window": did you mean' --policy 'fixd-window limit=1 window=1s'

# ---- --json: every field of the decision, part and limit included -------------
# fixed-window L=3 W=1000 and token-bucket C=2 at 1/ms (r=1, p=1, tau=2):
#  t=0:  FW 0->1 (rem 2, reset 1000); TB b=0 -> 1 (rem 1, reset 1): the
#        least remaining is the bucket's: part 1, limit 2; reset 1000; the
#        bucket's own reset 1 (part_reset_ms).
#  t=0:  FW 1->2 (rem 1); TB 1 -> 2 (rem 0, reset 2): part 1, limit 2, its
#        own reset 2.
#  t=10: FW 2->3 (rem 0, reset 990); TB b=max(2-10,0)=0 -> 1 (rem 1): the
#        window's 0 is least: part 0, limit 3; reset 990.
#  t=10: FW denies (retry 990, reset 990); TB would admit, as it is: rem 1,
#        reset 1. Denied: remaining 0 (part 0, limit 3), retry 990, reset 990.
printf '0 c\n0 c\n10 c\n10 c\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
{"t":0,"key":"c","cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":1000,"delay_ms":0,"limit":2,"part":1,"part_reset_ms":1,"enforced":true,"shadow_denied":false,"local":false}
{"t":0,"key":"c","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":1000,"delay_ms":0,"limit":2,"part":1,"part_reset_ms":2,"enforced":true,"shadow_denied":false,"local":false}
{"t":10,"key":"c","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":990,"delay_ms":0,"limit":3,"part":0,"part_reset_ms":990,"enforced":true,"shadow_denied":false,"local":false}
{"t":10,"key":"c","cost":1,"allowed":false,"remaining":0,"retry_after_ms":990,"reset_ms":990,"delay_ms":0,"limit":3,"part":0,"part_reset_ms":990,"enforced":true,"shadow_denied":false,"local":false}
EOF
C2='fixed-window limit=3 window=1s; token-bucket capacity=2 rate=1/ms'
ok "--json" --json "$C2"
grep -qx '# 4 requests, 3 allowed, 1 denied, 1 keys held' "$tmp/err" || fail "--json: summary on stderr: $(cat "$tmp/err")"
# a verb line's object: "verb" after "key", the rest as a request's
cp "$tmp/verbs.in" "$tmp/in"
sim --json 'token-bucket capacity=2 rate=1/s'
[[ $rc -eq 0 ]] || fail "--json, verb lines: exit $rc: $(cat "$tmp/err")"
sed -n '2p;6p;10p' "$tmp/out" >"$tmp/got"
cat >"$tmp/want" <<'EOF'
{"t":0,"key":"a","verb":"peek","cost":2,"allowed":false,"remaining":1,"retry_after_ms":1000,"reset_ms":1000,"delay_ms":0,"limit":2,"part":0,"part_reset_ms":1000,"enforced":true,"shadow_denied":false,"local":false}
{"t":0,"key":"a","verb":"refund","cost":1,"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":2000,"delay_ms":0,"limit":2,"part":0,"part_reset_ms":2000,"enforced":true,"shadow_denied":false,"local":false}
{"t":500,"key":"a","verb":"reset","cost":1,"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":1000,"delay_ms":0,"limit":2,"part":0,"part_reset_ms":1000,"enforced":true,"shadow_denied":false,"local":false}
EOF
cmp -s "$tmp/want" "$tmp/got" || fail "--json, verb lines: $(diff "$tmp/want" "$tmp/got")"
[[ $(wc -l <"$tmp/out") -eq 13 && $(grep -c '"verb"' "$tmp/out") -eq 7 ]] ||
    fail "--json, verb lines: not one object a line, \"verb\" on the 7 verb lines: $(cat "$tmp/out")"
# shadow_denied is always given: true where the line says shadow_denied=1
cp "$tmp/shadow.in" "$tmp/in"
sim --json "$SH"
[[ "$(grep -o '"shadow_denied":[a-z]*' "$tmp/out" | tr '\n' ' ')" == \
    '"shadow_denied":false "shadow_denied":true "shadow_denied":true "shadow_denied":true "shadow_denied":true "shadow_denied":false ' ]] ||
    fail "--json, shadow part: $(cat "$tmp/out")"
# the JSON says what the lines say, line for line, for every algorithm
cp "$tmp/gen" "$tmp/in"
for spec in 'token-bucket capacity=50 rate=1/s' 'leaky-bucket capacity=50 rate=1/s' \
    'sliding-log limit=50 window=1s' 'gcra rate=10/s burst=50; fixed-window limit=80 window=1h'; do
    sim "$spec"
    cp "$tmp/out" "$tmp/lines"
    sim "$spec" --json
    python3 -c '
import json, sys
for n, line in enumerate(open(sys.argv[1]), 1):
    d = json.loads(line)
    assert list(d) == ["t", "key", "cost", "allowed", "remaining", "retry_after_ms", "reset_ms",
                       "delay_ms", "limit", "part", "part_reset_ms", "enforced", "shadow_denied", "local"], list(d)
    print("t=%d key=%s cost=%d allowed=%d remaining=%d retry_after_ms=%d reset_ms=%d delay_ms=%d" % (
        d["t"], d["key"], d["cost"], d["allowed"], d["remaining"], d["retry_after_ms"],
        d["reset_ms"], d["delay_ms"]))
' "$tmp/out" >"$tmp/from-json" 2>"$tmp/py-err" || fail "--json, $spec: not one JSON object a line: $(head -3 "$tmp/py-err")"
    cmp -s "$tmp/lines" "$tmp/from-json" || fail "--json, $spec: the objects differ from the lines"
done
# keys as JSON strings: NUL and bytes that are not UTF-8 escaped, UTF-8 kept
printf '0 a\0b\n0 \377x\n0 \320\272"\\\n' >"$tmp/in"
sim --json 'fixed-window limit=5 window=1s'
python3 -c '
import json, sys
keys = [json.loads(l)["key"] for l in open(sys.argv[1], encoding="utf-8")]
assert keys == ["a\x00b", "\xffx", "\u043a\"\\"], keys' "$tmp/out" 2>"$tmp/py-err" ||
    fail "--json keys: $(cat "$tmp/py-err") in $(cat -v "$tmp/out")"

# ---- --summary: per part and per key, the most denied first ----------------------
printf '0 c\n0 c\n10 c\n10 c\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
requests=4 allowed=3 denied=1 keys=1
part=0 requests=2 allowed=1 denied=1 config=fixed-window limit=3 window=1s
part=1 requests=2 allowed=2 denied=0 config=token-bucket capacity=2 rate=1/ms
key=c requests=4 allowed=3 denied=1
EOF
ok "--summary, per part" --summary "$C2"
grep -qx '# 4 requests, 3 allowed, 1 denied, 1 keys held' "$tmp/err" || fail "--summary: stderr: $(cat "$tmp/err")"
# fixed-window limit=1: x admitted; y admitted then denied; z admitted; w
# denied twice after one. Most denied first (w 2, y 1), then by requests,
# then in the order first seen (x before z).
printf '0 x\n0 y\n0 y\n0 z\n0 w\n0 w\n0 w\n' >"$tmp/in"
cat >"$tmp/want" <<'EOF'
requests=7 allowed=4 denied=3 keys=4
part=0 requests=7 allowed=4 denied=3 config=fixed-window limit=1 window=1s
key=w requests=3 allowed=1 denied=2
key=y requests=2 allowed=1 denied=1
key=x requests=1 allowed=1 denied=0
key=z requests=1 allowed=1 denied=0
EOF
ok "--summary, keys ranked" 'fixed-window limit=1 window=1s' --summary
ok "--summary=all" 'fixed-window limit=1 window=1s' --summary=all
head -3 "$tmp/want" >"$tmp/want2"
printf 'other_keys=3 requests=4 allowed=3 denied=1\n' >>"$tmp/want2"
mv "$tmp/want2" "$tmp/want"
ok "--summary=1" 'fixed-window limit=1 window=1s' --summary=1
sim 'fixed-window limit=1 window=1s' --summary=2 --json
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["requests"], d["allowed"], d["denied"], d["keys"], d["not_enforced"]) == (7, 4, 3, 4, 0), d
assert d["parts"] == [{"part": 0, "config": "fixed-window limit=1 window=1s", "requests": 7, "allowed": 4, "denied": 3}], d
assert d["most_denied"] == [{"key": "w", "requests": 3, "allowed": 1, "denied": 2},
                            {"key": "y", "requests": 2, "allowed": 1, "denied": 1}], d
assert d["other_keys"] == {"keys": 2, "requests": 2, "allowed": 2, "denied": 0}, d
' "$tmp/out" 2>"$tmp/py-err" || fail "--summary --json: $(cat "$tmp/py-err")"
[[ $(wc -l <"$tmp/out") -eq 1 ]] || fail "--summary --json: not one line"
: >"$tmp/in"
: >"$tmp/want"
printf 'requests=0 allowed=0 denied=0 keys=0\npart=0 requests=0 allowed=0 denied=0 config=fixed-window limit=1 window=1s\n' >"$tmp/want"
ok "--summary, an empty trace" 'fixed-window limit=1 window=1s' --summary
# verb lines are counted apart: not requests, and a key seen only in verb
# lines (b) is not among the keys
cp "$tmp/verbs.in" "$tmp/in"
cat >"$tmp/want" <<'EOF'
requests=6 allowed=5 denied=1 keys=1 peeks=3 refunds=3 resets=1
part=0 requests=6 allowed=5 denied=1 config=token-bucket capacity=2 rate=1/s
key=a requests=6 allowed=5 denied=1
EOF
ok "--summary, verb lines" 'token-bucket capacity=2 rate=1/s' --summary
# requests a shadow part would have denied; a shadow part is named so, and
# sets no decision (the decisions come from the enforced parts)
cp "$tmp/shadow.in" "$tmp/in"
cat >"$tmp/want" <<'EOF'
requests=5 allowed=4 denied=1 keys=1 shadow_denied=3 peeks=1 refunds=0 resets=0
part=0 requests=5 allowed=4 denied=1 config=fixed-window limit=3 window=1s
part=1 requests=0 allowed=0 denied=0 config=shadow fixed-window limit=1 window=1s
key=a requests=5 allowed=4 denied=1
EOF
ok "--summary, a shadow part" "$SH" --summary
sim "$SH" --summary --json
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["requests"], d["allowed"], d["denied"], d["keys"]) == (5, 4, 1, 1), d
assert (d["shadow_denied"], d["peeks"], d["refunds"], d["resets"]) == (3, 1, 0, 0), d
assert [p["config"] for p in d["parts"]] == ["fixed-window limit=3 window=1s", "shadow fixed-window limit=1 window=1s"], d
' "$tmp/out" 2>"$tmp/py-err" || fail "--summary --json, a shadow part: $(cat "$tmp/py-err")"
bad_args "--summary=0" '--summary=0: expected a number of keys' 'fixed-window limit=1 window=1s' --summary=0
bad_args "--summary=x" '--summary=x: expected' 'fixed-window limit=1 window=1s' --summary=x
# (the parser every command shares names the option, as check's does)
bad_args "--json=1" 'option --json takes no value' 'fixed-window limit=1 window=1s' --json=1
# a bad line: the lines before it are not summed up (exit 2, no summary)
printf '0 a\nx a\n' >"$tmp/in"
: >"$tmp/want"
bad "--summary, a bad line" 2 'time "x"' 'fixed-window limit=1 window=1s' --summary

# ---- --svg FILE: a picture of the run -----------------------------------------
# check_svg FILE SPEC [KEY:REQUESTS:ALLOWED:DENIED...]: FILE is a well-formed,
# self-contained SVG document titled with SPEC, with labelled axes, and one
# panel per KEY in that order whose bars add up to the counts given (read
# from each bar's tooltip: "t=A..B ms: N admitted, M denied; ...").
cat >"$tmp/check_svg.py" <<'EOF'
import re, sys
import xml.etree.ElementTree as ET
path, spec, want = sys.argv[1], sys.argv[2], sys.argv[3:]
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(path).getroot()
def fail(msg):
    sys.exit("%s: %s" % (path, msg))
def cls(e):
    return e.get("class", "").split()
def text(e):
    return "".join(e.itertext())
if root.tag != NS + "svg":
    fail("the root is %s, not svg" % root.tag)
for attr in ("width", "height", "viewBox"):
    if not root.get(attr):
        fail("no %s" % attr)
title = root.find(NS + "title")
if title is None or spec not in title.text:
    fail("no <title> with the policy")
for e in root.iter():
    if e.tag in (NS + "script", NS + "image", NS + "foreignObject", NS + "style", NS + "a"):
        fail("not self-contained: %s" % e.tag)
    for k, v in e.attrib.items():
        if k.endswith("href") or "url(" in v:
            fail("an outside reference: %s=%s" % (k, v))
titles = [text(e) for e in root.iter(NS + "text") if "axis-title" in cls(e)]
unit = [t for t in titles if re.fullmatch(r"time in the trace( since t=-?\d+ ms)? \((ms|s|min|h|d)\)", t)]
if not unit:
    fail("no time axis title in %s" % titles)
panels = [g for g in root.iter(NS + "g") if "panel" in cls(g)]
if len(panels) != len(want):
    fail("%d panels, want %d" % (len(panels), len(want)))
for g, w in zip(panels, want):
    key, n, a, d = w.rsplit(":", 3)
    keys = [text(e) for e in g.iter(NS + "text") if "key" in cls(e)]
    if keys != [key]:
        fail("panel %s names %s" % (key, keys))
    ptitles = [text(e) for e in g.iter(NS + "text") if "axis-title" in cls(e)]
    if not any(t.startswith("requests per ") for t in ptitles) or "remaining" not in ptitles:
        fail("panel %s: axis titles %s" % (key, ptitles))
    ticks = [e for t in g.iter(NS + "g") if "tick" in cls(t) for e in t.iter(NS + "text")]
    if len(ticks) < 4:
        fail("panel %s: %d tick labels" % (key, len(ticks)))
    got_a = got_d = 0
    for bar in g.iter(NS + "g"):
        t = bar.find(NS + "title")
        if t is None:
            continue
        m = re.match(r"t=-?\d+\.\.-?\d+ ms: (\d+) admitted, (\d+) denied; remaining \d+ after the last$", t.text)
        if not m:
            fail("panel %s: a bar's tooltip: %s" % (key, t.text))
        na, nd = int(m.group(1)), int(m.group(2))
        rects = {c: r for r in bar.iter(NS + "rect") for c in cls(r)}
        if (na > 0) != ("admitted" in rects) or (nd > 0) != ("denied" in rects):
            fail("panel %s: bar %s has marks %s" % (key, t.text, sorted(rects)))
        got_a += na
        got_d += nd
    if (got_a, got_d) != (int(a), int(d)) or got_a + got_d != int(n):
        fail("panel %s: bars add up to %d admitted, %d denied; want %s" % (key, got_a, got_d, w))
    line = [e for e in g.iter(NS + "polyline") if "remaining" in cls(e)]
    if len(line) != 1 or not line[0].get("points", "").strip():
        fail("panel %s: no remaining line" % key)
EOF
check_svg() {
    python3 "$tmp/check_svg.py" "$@" 2>"$tmp/py-err" || fail "--svg: $(cat "$tmp/py-err")"
}
# eight keys, kN with N requests at 1 ms apart, under a limit of 3 an
# hour: kN has min(N, 3) admitted, the rest denied. The 6 busiest drawn.
awk 'BEGIN { t = 0; for (n = 1; n <= 8; n++) for (i = 0; i < n; i++) print t++, "k" n }' >"$tmp/in"
sim 'fixed-window limit=3 window=1h' --svg "$tmp/p.svg"
[[ $rc -eq 0 ]] || fail "--svg: exit $rc: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/out") -eq 36 ]] || fail "--svg: the lines are not printed as without it"
check_svg "$tmp/p.svg" 'fixed-window limit=3 window=1h' k8:8:3:5 k7:7:3:4 k6:6:3:3 k5:5:3:2 k4:4:3:1 k3:3:3:0
grep -q 'time in the trace (ms)' "$tmp/p.svg" || fail "--svg: the time axis is not in ms for a 36 ms trace"
# the busiest are those with the most requests, not the most denied: "calm"
# has 10, an hour apart, all admitted
{ cat "$tmp/in"; for h in 0 1 2 3 4 5 6 7 8 9; do echo "$((h * 3600000)) calm"; done; } | sort -n -s -k1,1 >"$tmp/in2"
mv "$tmp/in2" "$tmp/in"
sim 'fixed-window limit=3 window=1h' --svg "$tmp/p.svg"
check_svg "$tmp/p.svg" 'fixed-window limit=3 window=1h' calm:10:10:0 k8:8:3:5 k7:7:3:4 k6:6:3:3 k5:5:3:2 k4:4:3:1
# with --summary, and a trace of a minute: the axis in seconds
awk 'BEGIN { for (t = 0; t <= 60000; t += 100) { print t, "api"; if (t % 1000 == 0) print t, "batch 5" } }' >"$tmp/in"
sim 'token-bucket capacity=10 rate=5/s' --summary --svg "$tmp/p.svg"
[[ $rc -eq 0 ]] || fail "--svg --summary: exit $rc: $(cat "$tmp/err")"
read -r api_n api_a api_d < <(sim 'token-bucket capacity=10 rate=5/s' --summary=all && sed -n 's/^key=api requests=\([0-9]*\) allowed=\([0-9]*\) denied=\([0-9]*\)$/\1 \2 \3/p' "$tmp/out")
read -r b_n b_a b_d < <(sed -n 's/^key=batch requests=\([0-9]*\) allowed=\([0-9]*\) denied=\([0-9]*\)$/\1 \2 \3/p' "$tmp/out")
check_svg "$tmp/p.svg" 'token-bucket capacity=10 rate=5/s' "api:$api_n:$api_a:$api_d" "batch:$b_n:$b_a:$b_d"
grep -q 'time in the trace (s)' "$tmp/p.svg" || fail "--svg: the time axis is not in s for a minute's trace"
# keys that XML would misread, or that are not UTF-8, and times far from 0
printf '1700000000000 <a&b>"\n1700000000500 \377\n1700000001000 <a&b>"\n' >"$tmp/in"
sim 'fixed-window limit=1 window=1s' --svg "$tmp/p.svg"
check_svg "$tmp/p.svg" 'fixed-window limit=1 window=1s' '<a&b>":2:2:0' '\xff:1:1:0'
grep -q 'since t=1700000000000 ms' "$tmp/p.svg" || fail "--svg: epoch times are not labelled from an origin"
# an empty trace: a picture that says so
: >"$tmp/in"
sim 'fixed-window limit=1 window=1s' --svg "$tmp/p.svg"
check_svg "$tmp/p.svg" 'fixed-window limit=1 window=1s'
grep -q 'no requests' "$tmp/p.svg" || fail "--svg, an empty trace: no word of it"
# a run that fails leaves no picture; a FILE that cannot be made reads nothing
printf '0 a\n1 a 0\n' >"$tmp/in"
sim 'fixed-window limit=1 window=1s' --svg "$tmp/p.svg"
[[ $rc -eq 2 && ! -e "$tmp/p.svg" ]] || fail "--svg, a bad line: exit $rc, the file is there: $(ls "$tmp")"
sim 'fixed-window limit=1 window=1s' --svg "$tmp/no/such/p.svg"
[[ $rc -eq 2 && ! -s "$tmp/out" ]] || fail "--svg in a missing directory: exit $rc"
grep -q -- "--svg $tmp/no/such/p.svg: No such file or directory" "$tmp/err" || fail "--svg, missing directory: $(cat "$tmp/err")"
bad_args "--svg without FILE" '--svg needs a FILE' 'fixed-window limit=1 window=1s' --svg
# verb lines are not drawn: a's panel has its 6 requests, b (verb lines
# only) none
cp "$tmp/verbs.in" "$tmp/in"
sim 'token-bucket capacity=2 rate=1/s' --svg "$tmp/p.svg"
[[ $rc -eq 0 ]] || fail "--svg, verb lines: exit $rc: $(cat "$tmp/err")"
check_svg "$tmp/p.svg" 'token-bucket capacity=2 rate=1/s' a:6:5:1

# ---- progress: on a terminal only, for long runs ----------------------------------
# --progress-after-ms is test-only: progress from the start of the run.
awk 'BEGIN { for (i = 0; i < 30000; i++) print i, "k" (i % 7) }' >"$tmp/in"
sim 'token-bucket capacity=5 rate=1/ms' --progress-after-ms 0
cp "$tmp/out" "$tmp/plain.out"
[[ "$(cat "$tmp/err")" == '# 30000 requests, 30000 allowed, 0 denied, 7 keys held' ]] ||
    fail "progress: written where stderr is not a terminal: $(head -c 300 "$tmp/err" | cat -v)"
if command -v script >/dev/null 2>&1; then
    # script runs the command on a pseudo-terminal: its stderr is the pty,
    # recorded in pty.log; stdin and stdout stay files
    script -qec "$(printf '%q ' "$SLUICE_BIN" simulate 'token-bucket capacity=5 rate=1/ms' --progress-after-ms 0) <$(printf '%q' "$tmp/in") >$(printf '%q' "$tmp/pty.out")" \
        /dev/null >"$tmp/pty.log" 2>&1
    rc=$?
    [[ $rc -eq 0 ]] || fail "progress on a terminal: exit $rc: $(cat -v "$tmp/pty.log" | head -5)"
    cmp -s "$tmp/plain.out" "$tmp/pty.out" || fail "progress on a terminal: stdout differs"
    grep -aq $'\rsluice simulate: line [0-9]*, [0-9]* requests, [0-9]*% of the input, [0-9]*\\.[0-9] s' "$tmp/pty.log" ||
        fail "progress on a terminal: no progress line: $(head -c 300 "$tmp/pty.log" | cat -v)"
    # erased before the summary
    grep -aq $'\r\033\\[K# 30000 requests' "$tmp/pty.log" ||
        fail "progress on a terminal: not erased before the summary: $(tail -c 200 "$tmp/pty.log" | cat -v)"
else
    echo "test_simulate: no script(1): progress on a terminal not tested"
fi
"$SLUICE_BIN" simulate --help | grep -q -- '--progress-after-ms' && fail "simulate --help shows a test-only option"

cli_test_end
