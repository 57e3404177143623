#!/usr/bin/env bash
# test_cli.sh: the subcommands that share limits between processes through a
# store: `sluice check`, `run`, `pipe` and `stats`. Every invocation is a new
# process on a shm: store file in a temporary directory, so the limits seen
# here are shared exactly as scripts share them. Time never comes from the
# wall clock where a value is checked: the hidden test-only option
# --manual-clock START_MS gives the store a manual clock (waits advance it at
# once), and `pipe --trace-file PATH` records every release as "t=MS units=N".
# The expected values are worked out from docs/semantics.md in the comments.
# ctest sets SLUICE_BIN (the built sluice) and SLUICE_SOURCE_DIR.
set -u

. "$(dirname "$0")/cli_test.sh" test_cli
src=${SLUICE_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}

# The shm: store is what makes separate invocations share a limit.
if ! "$SLUICE_BIN" check probe --policy 'fixed-window limit=1 window=1s' --store "shm:$tmp/probe.shm" \
    >"$tmp/out" 2>"$tmp/err"; then
    echo "test_cli: the shm: store does not work: $(cat "$tmp/out" "$tmp/err")" >&2
    exit 1
fi

# sl ARGS...: runs sluice ARGS with no input; sets rc, $tmp/out, $tmp/err.
sl() {
    "$SLUICE_BIN" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# want NAME RC [LINE]: the last run exited RC and, when LINE is given,
# printed exactly that one line on stdout.
want() {
    local name=$1 want_rc=$2
    if [[ $rc -ne $want_rc ]]; then
        fail "$name: exited $rc, want $want_rc; stderr: $(cat -v "$tmp/err")"
    fi
    if [[ $# -ge 3 ]] && [[ "$(cat "$tmp/out")" != "$3" || $(wc -l <"$tmp/out") -ne 1 ]]; then
        fail "$name: stdout is '$(cat -v "$tmp/out")', want '$3'"
    fi
}

# bad NAME PATTERN ARGS...: sluice ARGS exits 2, prints nothing on stdout,
# and says what is wrong on stderr (matching the extended regex PATTERN).
bad() {
    local name=$1 pattern=$2
    shift 2
    sl "$@"
    [[ $rc -eq 2 ]] || fail "$name: exited $rc, want 2"
    [[ -s "$tmp/out" ]] && fail "$name: wrote to stdout: $(cat -v "$tmp/out")"
    grep -Eq -- "$pattern" "$tmp/err" || fail "$name: stderr does not match /$pattern/: $(cat -v "$tmp/err")"
}

# json_ok NAME FILE: FILE holds exactly one JSON object on one line.
if python3 -c 'import json' >/dev/null 2>&1; then
    json_ok() {
        [[ $(wc -l <"$2") -eq 1 ]] || fail "$1: $(wc -l <"$2") lines of JSON, want 1"
        python3 -c 'import json,sys; d=json.load(sys.stdin); assert isinstance(d, dict)' <"$2" 2>/dev/null ||
            fail "$1: not one JSON object: $(cat -v "$2")"
    }
else
    json_ok() {
        grep -Eqx '\{("[a-z_]+":(true|false|-?[0-9]+|"([^"\\]|\\.)*")(,|\}$))+' "$2" ||
            fail "$1: not one JSON object: $(cat -v "$2")"
    }
fi

# ---- help ------------------------------------------------------------------

"$SLUICE_BIN" help >"$tmp/help"
for cmd in check peek refund reset run pipe stats simulate demo version; do
    grep -Eq "^  $cmd " "$tmp/help" || fail "sluice help does not list $cmd"
    for flag in --help -h; do
        sl "$cmd" "$flag"
        want "$cmd $flag" 0
        grep -q "^usage: sluice $cmd" "$tmp/out" || fail "$cmd $flag: no usage line on stdout"
        [[ -s "$tmp/err" ]] && fail "$cmd $flag wrote to stderr: $(cat "$tmp/err")"
        grep -Eq -- '--manual-clock|--trace-file' "$tmp/out" && fail "$cmd $flag shows a test-only option"
    done
done
for cmd in demo version; do
    sl "$cmd" extra
    want "$cmd extra" 2
    grep -q "unexpected argument 'extra'" "$tmp/err" || fail "$cmd extra: no message naming the argument"
done
sl check --help
for word in '--policy SPEC' '--cost N' '--json' '--name NAME' '--store URL' 'exit status'; do
    grep -q -- "$word" "$tmp/out" || fail "check --help does not mention $word"
done
for cmd in peek refund reset; do
    sl "$cmd" --help
    for word in "usage: sluice $cmd KEY --policy SPEC" '--json' '--name NAME' '--store URL' 'exit status' \
        'shadow_denied=1' 'as sluice check prints it'; do
        grep -q -- "$word" "$tmp/out" || fail "$cmd --help does not mention $word"
    done
done
sl peek --help
grep -q -- '--cost N' "$tmp/out" || fail "peek --help does not mention --cost N"
sl refund --help
grep -q -- '--cost N  *what to give back (required)' "$tmp/out" || fail "refund --help: --cost is not required"
sl reset --help
grep -q -- '--cost' "$tmp/out" && fail "reset --help mentions --cost"
sl check --help
grep -q 'shadow_denied=1' "$tmp/out" || fail "check --help does not mention shadow_denied=1"
grep -q 'sluice peek' "$tmp/out" || fail "check --help does not mention sluice peek"
sl run --help
grep -q -- '--wait=TIMEOUT' "$tmp/out" || fail "run --help does not mention --wait=TIMEOUT"
sl pipe --help
grep -q -- '--unit' "$tmp/out" || fail "pipe --help does not mention --unit"

# ---- check: one limit across invocations --------------------------------------
# fixed-window limit=2 window=1m: windows [0, 60000), [60000, 120000), ...
#  t=0:     count 0 -> 1, remaining 1, reset 60000 - 0.
#  t=0:     1 -> 2, remaining 0.
#  t=0:     2 + 1 > 2: denied, retry at 60000, remaining 0, reset 60000.
#  t=1000:  denied, retry 59000, reset 59000 (the JSON form).
#  t=60000: a new window: 0 -> 1, remaining 1, reset 60000.
S="shm:$tmp/check.shm"
P='fixed-window limit=2 window=1m'
sl check k --policy "$P" --store "$S" --manual-clock 0
want "check 1" 0 "allowed remaining=1 reset_ms=60000"
sl check --manual-clock 0 --store "$S" --policy "$P" k # options in any order
want "check 2" 0 "allowed remaining=0 reset_ms=60000"
sl check k --policy "$P" --store "$S" --manual-clock 0
want "check 3" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
sl check k --policy "$P" --store "$S" --manual-clock 1000 --json
want "check --json, denied" 1 \
    '{"allowed":false,"remaining":0,"retry_after_ms":59000,"reset_ms":59000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":59000,"shadow_denied":false,"local":false}'
json_ok "check --json, denied" "$tmp/out"
[[ -s "$tmp/err" ]] && fail "check --json wrote to stderr: $(cat "$tmp/err")"
# another name, another key: each a separate limit; another SPEC of the
# same name is the same limit retuned (the 2 in use carried to limit=3)
sl check k --policy "$P" --store "$S" --manual-clock 1000 --name other
want "check --name other" 0 "allowed remaining=1 reset_ms=59000"
sl check k --policy 'fixed-window limit=3 window=1m' --store "$S" --manual-clock 1000
want "check, another SPEC" 0 "allowed remaining=0 reset_ms=59000"
sl check k2 --policy "$P" --store "$S" --manual-clock 1000 --cost 2 --json
want "check --cost 2 --json" 0 \
    '{"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":59000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":59000,"shadow_denied":false,"local":false}'
json_ok "check --cost 2 --json" "$tmp/out"
sl check k --policy "$P" --store "$S" --manual-clock 60000
want "check, next window" 0 "allowed remaining=1 reset_ms=60000"
# a key that begins with '-': --key, or after "--"
sl check --key -dash --policy "$P" --store "$S" --manual-clock 60000
want "check --key -dash" 0 "allowed remaining=1 reset_ms=60000"
sl check --policy "$P" --store "$S" --manual-clock 60000 -- -dash
want "check -- -dash" 0 "allowed remaining=0 reset_ms=60000"

# --strict changes nothing for a store that always decides (local stores)
sl check k --policy "$P" --store "shm:$tmp/strict.shm" --manual-clock 0 --strict
want "check --strict, a shm: store" 0 "allowed remaining=1 reset_ms=60000"
[[ -s "$tmp/err" ]] && fail "check --strict, a shm: store: stderr: $(cat "$tmp/err")"

# The real clock: the windows are aligned on CLOCK_MONOTONIC, so only the
# shape of the line is known.
sl check real --policy "$P" --store "shm:$tmp/real.shm"
want "check, real clock" 0
grep -Eqx 'allowed remaining=1 reset_ms=[0-9]+' "$tmp/out" || fail "check, real clock: '$(cat "$tmp/out")'"
sl check real --policy "$P" --store "shm:$tmp/real.shm" --json
want "check --json, real clock" 0
json_ok "check --json, real clock" "$tmp/out"

# Leaky bucket, capacity 2 at 1/s: the admitted request's delay is printed.
#  t=0: b=0, delay 0; TAT 1000: remaining 1, reset 1000.
#  t=0: b=1000, delay 1000; TAT 2000: remaining 0, reset 2000.
#  t=0: b=2000: denied, retry 1000.
# (a store of their own: a store's time is the highest reading it has seen,
# and waits count from the reading, so an earlier clock would add to them)
L='leaky-bucket capacity=2 rate=1/s'
sl check q --policy "$L" --store "shm:$tmp/leaky.shm" --manual-clock 0
want "leaky 1" 0 "allowed remaining=1 reset_ms=1000 delay_ms=0"
sl check q --policy "$L" --store "shm:$tmp/leaky.shm" --manual-clock 0 --json
want "leaky 2" 0 \
    '{"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":2000,"delay_ms":1000,"limit":2,"enforced":true,"part":0,"part_reset_ms":2000,"shadow_denied":false,"local":false}'
sl check q --policy "$L" --store "shm:$tmp/leaky.shm" --manual-clock 0
want "leaky 3" 1 "denied retry_after_ms=1000 remaining=0 reset_ms=2000"

# The default store: shm:$XDG_RUNTIME_DIR/sluice.shm.
mkdir "$tmp/xdg" && chmod 700 "$tmp/xdg"
XDG_RUNTIME_DIR=$tmp/xdg "$SLUICE_BIN" check d --policy "$P" --manual-clock 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
want "check, default store" 0 "allowed remaining=1 reset_ms=60000"
[[ -f "$tmp/xdg/sluice.shm" ]] || fail "check did not use \$XDG_RUNTIME_DIR/sluice.shm"
XDG_RUNTIME_DIR=$tmp/xdg "$SLUICE_BIN" check d --policy "$P" --manual-clock 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
want "check, default store again" 0 "allowed remaining=0 reset_ms=60000"

# ---- check: bad arguments exit 2 and change nothing ------------------------
# None of these may even create the store file.
B="shm:$tmp/bad.shm"
bad "check, no arguments" 'missing --policy' check
bad "check, no KEY" 'missing KEY' check --policy "$P" --store "$B"
bad "check, no SPEC" 'missing --policy' check k --store "$B"
bad "check, bad SPEC" 'bad --policy SPEC: .*limit' check k --policy 'fixed-window limit=0 window=1m' --store "$B"
bad "check, unknown parameter" 'bad --policy SPEC: at 13: unknown parameter "limt": did you mean "limit"\?' \
    check k --policy 'fixed-window limt=2 window=1m' --store "$B"
grep -q '\^' "$tmp/err" || fail "check, unknown parameter: no caret under the position: $(cat "$tmp/err")"
bad "check, unknown algorithm" 'bad --policy SPEC' check k --policy 'no-such-bucket limit=2' --store "$B"
bad "check, misspelt algorithm" 'unknown algorithm "fixd-window": did you mean "fixed-window"\?' \
    check k --policy 'fixd-window limit=2 window=1m' --store "$B"
bad "check, a fractional window" 'window "1.5s": durations are integers; write 1500ms' \
    check k --policy 'fixed-window limit=2 window=1.5s' --store "$B"
bad "check, cost 0" "--cost '0' is not a positive integer" check k --policy "$P" --store "$B" --cost 0
bad "check, cost abc" "--cost 'abc'" check k --policy "$P" --store "$B" --cost abc
bad "check, cost above the limit" '--cost 3 is above 2' check k --policy "$P" --store "$B" --cost 3
bad "check, huge cost" 'too large' check k --policy "$P" --store "$B" --cost 99999999999999999999
bad "check, unknown option" "unknown option '--frob'" check k --policy "$P" --store "$B" --frob
bad "check, option of another command" "unknown option '--wait'" check k --policy "$P" --store "$B" --wait
bad "check, option twice" '--policy is given twice' check k --policy "$P" --policy "$P" --store "$B"
bad "check, --json=1" '--json takes no value' check k --policy "$P" --store "$B" --json=1
bad "check, --policy without SPEC" '--policy needs a value' check k --store "$B" --policy
bad "check, two keys" "unexpected argument 'k2'" check k k2 --policy "$P" --store "$B"
bad "check, KEY and --key" 'KEY is given twice' check k --key k2 --policy "$P" --store "$B"
bad "check, empty KEY" 'KEY is 0 bytes' check '' --policy "$P" --store "$B"
bad "check, long KEY" 'KEY is 513 bytes' check "$(printf 'k%.0s' $(seq 513))" --policy "$P" --store "$B"
bad "check, bad --name" "bad --name 'a b'" check k --policy "$P" --store "$B" --name 'a b'
bad "check, bad --manual-clock" "--manual-clock 'x'" check k --policy "$P" --store "$B" --manual-clock x
bad "check, empty --store" '--store needs a URL' check k --policy "$P" --store ''
[[ -e "$tmp/bad.shm" ]] && fail "bad arguments created the store file"
bad "check, unknown store" 'store nosuch:x: .*scheme' check k --policy "$P" --store 'nosuch:x'
bad "check, bad store parameter" 'max_keys' check k --policy "$P" --store "shm:$tmp/bad.shm?max_keys=0"
# a store's path is named once, and a missing directory as such
once() { # NAME TEXT: TEXT occurs exactly once in $tmp/err
    local n
    n=$(grep -oF -- "$2" "$tmp/err" | wc -l)
    [[ $n -eq 1 ]] || fail "$1: '$2' appears $n times in: $(cat "$tmp/err")"
}
bad "check, store in a missing directory" "shm:$tmp/no/such/dir/s.shm: the directory it would be in does not exist" \
    check k --policy "$P" --store "shm:$tmp/no/such/dir/s.shm"
once "check, store in a missing directory" "$tmp/no/such/dir/s.shm"
bad "stats, store in a missing directory" "shm:$tmp/no/such/s.shm: the directory it would be in does not exist" \
    stats --store "shm:$tmp/no/such/s.shm?max_keys=10"
once "stats, store in a missing directory" "$tmp/no/such/s.shm"
printf 'x' >"$tmp/notdir"
bad "check, store under a file" "shm:$tmp/notdir/s.shm: Not a directory" check k --policy "$P" --store "shm:$tmp/notdir/s.shm"
touch "$tmp/open.shm" && chmod 644 "$tmp/open.shm"
bad "check, a store file open to others" "open to others" check k --policy "$P" --store "shm:$tmp/open.shm"
once "check, a store file open to others" "$tmp/open.shm"
bad "simulate, a store file open to others" "open to others" simulate "$P" --store "shm:$tmp/open.shm"
once "simulate, a store file open to others" "$tmp/open.shm"
bad "simulate, store in a missing directory" "shm:$tmp/no/such/dir/s.shm: the directory it would be in does not exist" \
    simulate "$P" --store "shm:$tmp/no/such/dir/s.shm"
once "simulate, store in a missing directory" "$tmp/no/such/dir/s.shm"
[[ -e "$tmp/no" ]] && fail "a store in a missing directory made it"
# Bad arguments against a store in use: its state is untouched. The key "k"
# of check.shm stands at 1 of 2 in the window of t=60000.
bad "check, cost above the limit (used store)" 'above' check k --policy "$P" --store "$S" --cost 3 --manual-clock 60000
bad "check, bad option (used store)" 'unknown option' check k --policy "$P" --store "$S" --bogus --manual-clock 60000
sl check k --policy "$P" --store "$S" --manual-clock 60000
want "check after bad arguments" 0 "allowed remaining=0 reset_ms=60000"

# ---- peek, refund, reset ---------------------------------------------------
# The same store, policy, KEY and --name as check; each prints a decision as
# check does: peek the request's (nothing consumed), refund and reset that of
# a request of cost 1 right after (docs/semantics.md, "Peek, refund, reset").
# On memory: (a store of one invocation), every KEY starts fresh:
# fixed-window limit=2 window=1m at t=0.
sl peek k --policy "$P" --store memory: --manual-clock 0
want "peek, memory:" 0 "allowed remaining=1 reset_ms=60000"
sl peek k --policy "$P" --store memory: --manual-clock 0 --cost 2 --json
want "peek --cost 2 --json" 0 \
    '{"allowed":true,"remaining":0,"retry_after_ms":0,"reset_ms":60000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":60000,"shadow_denied":false,"local":false}'
json_ok "peek --json" "$tmp/out"
sl refund k --policy "$P" --store memory: --manual-clock 0 --cost 2
want "refund, a key not held" 0 "allowed remaining=1 reset_ms=60000"
sl refund k --policy "$P" --store memory: --manual-clock 1000 --cost 1 --json
want "refund --json" 0 \
    '{"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":59000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":59000,"shadow_denied":false,"local":false}'
sl reset k --policy "$P" --store memory: --manual-clock 0
want "reset, memory:" 0 "allowed remaining=1 reset_ms=60000"
sl reset --key -dash --policy "$P" --store memory: --manual-clock 0 --json
want "reset --key --json" 0 \
    '{"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":60000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":60000,"shadow_denied":false,"local":false}'
sl peek q --policy "$L" --store memory: --manual-clock 0
want "peek, a leaky bucket: delay_ms as check" 0 "allowed remaining=1 reset_ms=1000 delay_ms=0"

# shadow_denied=1: a shadow part (tried, never enforced) would have denied.
# fixed-window L=5 W=1m, and a shadow fixed window L=2 W=1m, at t=0:
#  1: 0->1 (rem 4), the shadow 0->1.   2: 1->2 (rem 3), the shadow 1->2.
#  3: 2->3 (rem 2): the shadow would deny (2+1 > 2), so says so.
#  4: 3->4 (rem 1), --json: "shadow_denied":true.
SH='fixed-window limit=5 window=1m; shadow fixed-window limit=2 window=1m'
SS="shm:$tmp/shadow.shm"
sl check s --policy "$SH" --store "$SS" --manual-clock 0
want "check, shadow 1" 0 "allowed remaining=4 reset_ms=60000"
sl check s --policy "$SH" --store "$SS" --manual-clock 0
want "check, shadow 2" 0 "allowed remaining=3 reset_ms=60000"
sl check s --policy "$SH" --store "$SS" --manual-clock 0
want "check, shadow 3: shadow_denied=1" 0 "allowed remaining=2 reset_ms=60000 shadow_denied=1"
sl check s --policy "$SH" --store "$SS" --manual-clock 0 --json
want "check --json, shadow 4" 0 \
    '{"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":60000,"delay_ms":0,"limit":5,"enforced":true,"part":0,"part_reset_ms":60000,"shadow_denied":true,"local":false}'
# a cost above a shadow part's limit is its denial, not an error (the
# largest cost is the least limit of the enforced parts): on a fresh key
sl peek s --policy "$SH" --store memory: --manual-clock 0 --cost 3
want "peek, shadow: shadow_denied=1" 0 "allowed remaining=2 reset_ms=60000 shadow_denied=1"
sl peek s --policy "$SH" --store memory: --manual-clock 0 --cost 2
want "peek, shadow admits" 0 "allowed remaining=3 reset_ms=60000"
sl check s --policy "$SH" --store memory: --manual-clock 0 --cost 5
want "check, cost above the shadow part's limit" 0 "allowed remaining=0 reset_ms=60000 shadow_denied=1"

# Bad arguments: exit 2 before any store is opened (none of these creates
# the store file), nothing changed.
for v in peek refund reset; do
    cost=()
    [[ $v == refund ]] && cost=(--cost 1) # else refund's missing --cost would be said first
    bad "$v, no arguments" 'missing --policy' "$v"
    bad "$v, no KEY" 'missing KEY' "$v" --policy "$P" --store "$B" "${cost[@]}"
    bad "$v, no SPEC" 'missing --policy' "$v" k --store "$B" "${cost[@]}"
    bad "$v, bad SPEC" 'bad --policy SPEC: .*limit' "$v" k --policy 'fixed-window limit=0 window=1m' --store "$B" \
        "${cost[@]}"
    bad "$v, unknown option" "unknown option '--frob'" "$v" k --policy "$P" --store "$B" --frob "${cost[@]}"
    bad "$v, two keys" "unexpected argument 'k2'" "$v" k k2 --policy "$P" --store "$B" "${cost[@]}"
    bad "$v, bad --name" "bad --name 'a b'" "$v" k --policy "$P" --store "$B" --name 'a b' "${cost[@]}"
done
bad "peek, cost 0" "--cost '0' is not a positive integer" peek k --policy "$P" --store "$B" --cost 0
bad "peek, cost -1" "--cost '-1' is not a positive integer" peek k --policy "$P" --store "$B" --cost -1
bad "peek, cost above the limit" '--cost 3 is above 2, the least limit of the policy' \
    peek k --policy "$P" --store "$B" --cost 3
bad "peek, --wait" "unknown option '--wait'" peek k --policy "$P" --store "$B" --wait
bad "refund, no --cost" 'missing --cost N: how much to give back' refund k --policy "$P" --store "$B"
grep -q '^usage: sluice refund KEY --policy SPEC --cost N' "$tmp/err" || fail "refund, no --cost: no usage line"
bad "refund, cost 0" "--cost '0' is not a positive integer" refund k --policy "$P" --store "$B" --cost 0
bad "refund, cost -2" "--cost '-2' is not a positive integer" refund k --policy "$P" --store "$B" --cost -2
bad "refund, cost above the limit" '--cost 3 is above 2' refund k --policy "$P" --store "$B" --cost 3
bad "refund, huge cost" 'too large' refund k --policy "$P" --store "$B" --cost 99999999999999999999
bad "refund, --strict" "unknown option '--strict'" refund k --policy "$P" --store "$B" --cost 1 --strict
bad "reset, --cost" "unknown option '--cost'" reset k --policy "$P" --store "$B" --cost 1
bad "reset, --strict" "unknown option '--strict'" reset k --policy "$P" --store "$B" --strict
[[ -e "$tmp/bad.shm" ]] && fail "bad arguments to peek, refund or reset created the store file"
bad "refund, unknown store" 'store nosuch:x: .*scheme' refund k --policy "$P" --store 'nosuch:x' --cost 1
bad "reset, store in a missing directory" "the directory it would be in does not exist" \
    reset k --policy "$P" --store "shm:$tmp/no/such/dir/s.shm"
# against a store in use: its state is untouched (check counts on as before)
U="shm:$tmp/used.shm"
sl check u --policy "$P" --store "$U" --manual-clock 0
want "check, a used store" 0 "allowed remaining=1 reset_ms=60000"
bad "refund above (used store)" 'above' refund u --policy "$P" --store "$U" --cost 3 --manual-clock 0
bad "refund without --cost (used store)" 'missing --cost' refund u --policy "$P" --store "$U" --manual-clock 0
bad "reset, bad option (used store)" 'unknown option' reset u --policy "$P" --store "$U" --bogus --manual-clock 0
bad "peek, bad SPEC (used store)" 'bad --policy' peek u --policy 'fixed-window limit=2' --store "$U" --manual-clock 0
sl check u --policy "$P" --store "$U" --manual-clock 0
want "check after bad peek, refund, reset" 0 "allowed remaining=0 reset_ms=60000"

# Across invocations on a shm: store, as scripts use them.
V="shm:$tmp/verbs.shm"
# peek consumes nothing: twice, then check gets what peek said
sl check v --policy "$P" --store "$V" --manual-clock 0
want "verbs: check 1" 0 "allowed remaining=1 reset_ms=60000"
sl peek v --policy "$P" --store "$V" --manual-clock 0
want "verbs: peek 1" 0 "allowed remaining=0 reset_ms=60000"
sl peek v --policy "$P" --store "$V" --manual-clock 0
want "verbs: peek 2 (the first consumed nothing)" 0 "allowed remaining=0 reset_ms=60000"
sl check v --policy "$P" --store "$V" --manual-clock 0
want "verbs: check after two peeks" 0 "allowed remaining=0 reset_ms=60000"
# a peek that would be denied: exit 1, and still nothing consumed
sl peek v --policy "$P" --store "$V" --manual-clock 0
want "verbs: peek, denied" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
sl peek v --policy "$P" --store "$V" --manual-clock 1000 --json
want "verbs: peek --json, denied" 1 \
    '{"allowed":false,"remaining":0,"retry_after_ms":59000,"reset_ms":59000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":59000,"shadow_denied":false,"local":false}'
sl check v --policy "$P" --store "$V" --manual-clock 0
want "verbs: check, denied" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
# refund gives back: the count 2 -> 1, so a request of cost 1 would be
# admitted with 0 left; check is admitted, then denied again
sl refund v --policy "$P" --store "$V" --manual-clock 0 --cost 1
want "verbs: refund 1" 0 "allowed remaining=0 reset_ms=60000"
sl check v --policy "$P" --store "$V" --manual-clock 0
want "verbs: check after the refund" 0 "allowed remaining=0 reset_ms=60000"
sl check v --policy "$P" --store "$V" --manual-clock 0
want "verbs: check, denied again" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
sl refund v --policy "$P" --store "$V" --manual-clock 0 --cost 2 --json
want "verbs: refund 2 --json" 0 \
    '{"allowed":true,"remaining":1,"retry_after_ms":0,"reset_ms":60000,"delay_ms":0,"limit":2,"enforced":true,"part":0,"part_reset_ms":60000,"shadow_denied":false,"local":false}'
# reset makes fresh: the window's count 0 again
sl check v --policy "$P" --store "$V" --manual-clock 0 --cost 2
want "verbs: check 2 after the refunds" 0 "allowed remaining=0 reset_ms=60000"
sl reset v --policy "$P" --store "$V" --manual-clock 0
want "verbs: reset" 0 "allowed remaining=1 reset_ms=60000"
sl check v --policy "$P" --store "$V" --manual-clock 0 --cost 2
want "verbs: check 2 after the reset" 0 "allowed remaining=0 reset_ms=60000"
# --name: another name's limit is another limit
sl reset v --policy "$P" --store "$V" --manual-clock 0 --name other
want "verbs: reset --name other" 0 "allowed remaining=1 reset_ms=60000"
sl peek v --policy "$P" --store "$V" --manual-clock 0
want "verbs: a reset of another name changed nothing" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
# a peek or refund of a key the store does not hold adds none
sl stats --store "$V" --json
keys_before=$(sed -n 's/.*"keys":\([0-9]*\).*/\1/p' "$tmp/out")
sl peek never --policy "$P" --store "$V" --manual-clock 0
want "verbs: peek, a key never seen" 0 "allowed remaining=1 reset_ms=60000"
sl refund never --policy "$P" --store "$V" --manual-clock 0 --cost 1
want "verbs: refund, a key never seen" 0 "allowed remaining=1 reset_ms=60000"
sl stats --store "$V" --json
[[ $(sed -n 's/.*"keys":\([0-9]*\).*/\1/p' "$tmp/out") == "$keys_before" ]] ||
    fail "verbs: a peek or refund added a key: $keys_before, then $(cat "$tmp/out")"
# shadow_denied=1 from peek: the shadow store above, at 4 of 5, the
# shadow part at its 2
sl peek s --policy "$SH" --store "$SS" --manual-clock 0
want "verbs: peek, shadow_denied=1" 0 "allowed remaining=0 reset_ms=60000 shadow_denied=1"
# the default store is check's
mkdir "$tmp/xdg2" && chmod 700 "$tmp/xdg2"
for v in check check peek refund peek reset peek; do
    XDG_RUNTIME_DIR=$tmp/xdg2 "$SLUICE_BIN" "$v" d --policy "$P" --manual-clock 0 \
        $([[ $v == refund ]] && echo --cost 1) >>"$tmp/default.out" 2>"$tmp/err" ||
        echo "exit $?" >>"$tmp/default.out"
done
cat >"$tmp/want" <<'EOF'
allowed remaining=1 reset_ms=60000
allowed remaining=0 reset_ms=60000
denied retry_after_ms=60000 remaining=0 reset_ms=60000
exit 1
allowed remaining=0 reset_ms=60000
allowed remaining=0 reset_ms=60000
allowed remaining=1 reset_ms=60000
allowed remaining=1 reset_ms=60000
EOF
cmp -s "$tmp/want" "$tmp/default.out" || fail "verbs on the default store: $(diff "$tmp/want" "$tmp/default.out")"

# ---- stats -------------------------------------------------------------------
# check.shm: decisions so far (the bad ones never reached it): fixed window
# allowed 9 (k x4, k --name other, k limit=3, k2, -dash x2), denied 2 (k x2)
# (the leaky bucket had a file of its own). Keys, one per (policy, key):
# (P, k) (other, k) (limit=3, k) (P, k2) (P, -dash): 5.
sl stats --store "$S"
want "stats" 0
for line in "store: $S" 'keys: 4' 'capacity: [0-9]+' 'allowed: 9' 'denied: 2' 'forgotten: [0-9]+' \
    'evicted: 0' 'refused: 0' 'failures: 0' 'reconnects: 0' 'shadow_denied: 0'; do
    grep -Eqx -- "$line" "$tmp/out" || fail "stats: no line /$line/ in: $(tr '\n' '|' <"$tmp/out")"
done
[[ $(wc -l <"$tmp/out") -eq 11 ]] || fail "stats: $(wc -l <"$tmp/out") lines, want 11"
sl stats --store "$S" --json
want "stats --json" 0
json_ok "stats --json" "$tmp/out"
for field in store keys capacity allowed denied forgotten evicted refused failures reconnects shadow_denied; do
    grep -q "\"$field\":" "$tmp/out" || fail "stats --json has no $field: $(cat "$tmp/out")"
done
grep -q '"allowed":9,' "$tmp/out" || fail "stats --json: allowed is not 9: $(cat "$tmp/out")"
sl stats --store 'memory:?max_keys=7'
want "stats memory:" 0
grep -qx 'capacity: 7' "$tmp/out" || fail "stats memory: capacity is not 7"
XDG_RUNTIME_DIR=$tmp/xdg "$SLUICE_BIN" stats >"$tmp/out" 2>"$tmp/err"
rc=$?
want "stats, default store" 0
grep -qx "store: shm:$tmp/xdg/sluice.shm" "$tmp/out" || fail "stats, default store: $(head -1 "$tmp/out")"
grep -qx "allowed: 2" "$tmp/out" || fail "stats, default store: not the store check used"
# Without a usable XDG_RUNTIME_DIR: TMP/sluice-UID/sluice.shm, TMP being
# $TMPDIR (or /tmp), in a directory of the user's that only they may enter.
# BUG: it was /tmp/sluice-UID.shm, a name another user could take first.
mkdir "$tmp/tmpdir" && chmod 1777 "$tmp/tmpdir"
mine=$tmp/tmpdir/sluice-$(id -u)
XDG_RUNTIME_DIR=$tmp/not-a-dir TMPDIR=$tmp/tmpdir "$SLUICE_BIN" stats >"$tmp/out" 2>"$tmp/err"
rc=$?
want "stats, fallback store (none yet)" 2 # stats makes no store: it says which one is not there
grep -q "shm:$mine/sluice.shm: the directory it would be in does not exist" "$tmp/err" ||
    fail "stats, fallback store: $(cat "$tmp/err")"
[[ -e $mine ]] && fail "stats made the fallback store's directory"
XDG_RUNTIME_DIR=$tmp/not-a-dir TMPDIR=$tmp/tmpdir "$SLUICE_BIN" check f --policy "$P" --manual-clock 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
want "check, fallback store" 0 "allowed remaining=1 reset_ms=60000"
[[ -f $mine/sluice.shm ]] || fail "check did not use $mine/sluice.shm"
[[ $(stat -c %a "$mine" 2>/dev/null) == 700 ]] || fail "the fallback directory is not 0700: $(stat -c %a "$mine")"
XDG_RUNTIME_DIR=$tmp/not-a-dir TMPDIR=$tmp/tmpdir "$SLUICE_BIN" stats >"$tmp/out" 2>"$tmp/err"
rc=$?
want "stats, fallback store" 0
grep -qx "store: shm:$mine/sluice.shm" "$tmp/out" || fail "stats, fallback store: $(head -1 "$tmp/out") $(cat "$tmp/err")"
# an XDG_RUNTIME_DIR that others may enter is not used either
mkdir "$tmp/xdg-open" && chmod 755 "$tmp/xdg-open"
XDG_RUNTIME_DIR=$tmp/xdg-open TMPDIR=$tmp/tmpdir "$SLUICE_BIN" check f --policy "$P" --manual-clock 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
want "check, XDG_RUNTIME_DIR open to others" 0 "allowed remaining=0 reset_ms=60000"
[[ -e $tmp/xdg-open/sluice.shm ]] && fail "a store was made in an XDG_RUNTIME_DIR open to others"
# the fallback directory open to others, or another user's: not used, and said why
chmod 755 "$mine"
XDG_RUNTIME_DIR=$tmp/not-a-dir TMPDIR=$tmp/tmpdir "$SLUICE_BIN" check f --policy "$P" >"$tmp/out" 2>"$tmp/err"
rc=$?
want "check, fallback directory open to others" 2
grep -q "directory $mine is open to others (mode 0755).*not used" "$tmp/err" || fail "fallback open to others: $(cat "$tmp/err")"
chmod 700 "$mine"
if [[ $(id -u) -eq 0 ]]; then
    # another user makes the directory first, in a /tmp of its own that
    # others may enter (the test's $tmp is the test's only)
    sticky=$(mktemp -d /tmp/sluice-cli-sticky.XXXXXX) && chmod 1777 "$sticky"
    setpriv --reuid=65534 --regid=65534 --clear-groups mkdir -m 777 "$sticky/sluice-0"
    XDG_RUNTIME_DIR=$tmp/not-a-dir TMPDIR=$sticky "$SLUICE_BIN" check f --policy "$P" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want "check, fallback directory another user made" 2
    grep -q "directory $sticky/sluice-0 belongs to uid 65534.*someone else" "$tmp/err" ||
        fail "fallback of another user: $(cat "$tmp/err")"
    [[ -e $sticky/sluice-0/sluice.shm ]] && fail "a store was made in another user's directory"
    rm -rf "$sticky"
else
    echo "(skipped: a directory of another user needs root to make; not root)"
fi
# ... and no file for a store that is not there
sl stats --store "shm:$tmp/no-such.shm"
want "stats, no such store" 2
grep -q "no-such.shm: no such file" "$tmp/err" || fail "stats, no such store: $(cat "$tmp/err")"
[[ -e "$tmp/no-such.shm" ]] && fail "stats made a store file"
# a store path that is not UTF-8 is still valid JSON (escaped)
sl check k --policy "$P" --store "shm:$tmp/w$(printf '\xff')x.shm"
sl stats --store "shm:$tmp/w$(printf '\xff')x.shm" --json
want "stats --json, a path that is not UTF-8" 0
json_ok "stats --json, a path that is not UTF-8" "$tmp/out"
grep -q 'w\\u00ffx.shm' "$tmp/out" || fail "stats --json: the byte 0xff is not escaped: $(cat -v "$tmp/out")"
# ... while UTF-8 passes through as it is
sl check k --policy "$P" --store "shm:$tmp/café.shm"
sl stats --store "shm:$tmp/café.shm" --json
json_ok "stats --json, a UTF-8 path" "$tmp/out"
grep -q 'café.shm' "$tmp/out" || fail "stats --json: the UTF-8 path changed: $(cat -v "$tmp/out")"
bad "stats, argument" "unexpected argument 'x'" stats x
bad "run, a timeout after a bare --wait" "'2s' after --wait" run --wait 2s --policy "$P" -- true
bad "stats, --policy" "unknown option '--policy'" stats --policy "$P"
bad "stats, bad store" 'store nosuch:' stats --store nosuch:

# ---- run -------------------------------------------------------------------
R="shm:$tmp/run.shm"
W='fixed-window limit=100 window=1h'
for status in 0 3 42; do
    sl run r --policy "$W" --store "$R" -- sh -c "exit $status"
    want "run, exit $status" "$status"
done
sl run r --policy "$W" --store "$R" -- printf '%s|%s|%s\n' 'two words' -- "x"
want "run passes arguments as they are" 0 'two words|--|x'
printf 'from stdin\n' | "$SLUICE_BIN" run r --policy "$W" --store "$R" -- cat >"$tmp/out" 2>"$tmp/err"
rc=$?
want "run passes stdin" 0 'from stdin'
{
    "$SLUICE_BIN" run r --policy "$W" --store "$R" -- sh -c 'kill -TERM $$' >"$tmp/out" 2>"$tmp/err"
    rc=$?
} 2>/dev/null # bash's own "Terminated"
want "run, killed by a signal" 143
sl run r --policy "$W" --store "$R" -- false
want "run false" 1

# From here on, the manual clock: a store of its own (a store's time never
# runs backwards, and the runs above brought it to CLOCK_MONOTONIC's reading).
R="shm:$tmp/run-manual.shm"

# Denied without --wait: exit 1, the retry time, and the command never runs.
# fixed-window limit=1 window=1m at t=0: the second request waits 60000 ms.
O='fixed-window limit=1 window=1m'
sl run once --policy "$O" --store "$R" --manual-clock 0 -- touch "$tmp/ran1"
want "run 1" 0
[[ -e "$tmp/ran1" ]] || fail "run 1: the command did not run"
sl run once --policy "$O" --store "$R" --manual-clock 0 -- touch "$tmp/ran2"
want "run 2, denied" 1
[[ -e "$tmp/ran2" ]] && fail "run 2: a denied command ran"
grep -q 'retry after 60000 ms' "$tmp/err" || fail "run 2: stderr lacks the retry time: $(cat "$tmp/err")"
# --wait: the manual clock sleeps the 60000 ms at once, then the command runs.
sl run once --policy "$O" --store "$R" --manual-clock 0 --wait -- touch "$tmp/ran3"
want "run --wait" 0
[[ -e "$tmp/ran3" ]] || fail "run --wait: the command did not run"
# Now at t=60000 the window [60000, 120000) is used up: the next is 60000 ms
# away. A timeout shorter than that gives up at once; one as long waits.
sl run once --policy "$O" --store "$R" --manual-clock 60000 --wait=59s -- touch "$tmp/ran4"
want "run --wait=59s" 1
[[ -e "$tmp/ran4" ]] && fail "run --wait=59s: the command ran"
grep -q 'within the --wait=59s timeout.*retry after 60000 ms' "$tmp/err" || fail "run --wait=59s: stderr: $(cat "$tmp/err")"
sl run once --policy "$O" --store "$R" --manual-clock 60000 --wait=59999 -- touch "$tmp/ran4"
want "run --wait=59999" 1
sl run once --policy "$O" --store "$R" --manual-clock 60000 --wait=1m -- touch "$tmp/ran5"
want "run --wait=1m" 0
[[ -e "$tmp/ran5" ]] || fail "run --wait=1m: the command did not run"
sl check once --policy "$O" --store "$R" --manual-clock 120000
want "run's requests are check's" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
# a leaky bucket's delay is slept (on the manual clock here) before the
# command: the second request waits behind the first, one second at 1/s
# (the store has seen 120000)
sl run lb --policy "$L" --store "$R" --manual-clock 120000 --trace-file "$tmp/lb1" -- true
want "run, leaky bucket, no delay" 0
sl run lb --policy "$L" --store "$R" --manual-clock 120000 --trace-file "$tmp/lb2" -- echo delayed
want "run, leaky bucket with a delay" 0 "delayed"
[[ "$(cat "$tmp/lb1")" == "t=120000" ]] || fail "run, leaky bucket: the first started at $(cat "$tmp/lb1")"
[[ "$(cat "$tmp/lb2")" == "t=121000" ]] || fail "run, leaky bucket: the second started at $(cat "$tmp/lb2")"

# A command that cannot run: 127 / 126, like shells, and nothing is counted
# (a store of its own, whose time starts at these readings).
R="shm:$tmp/gone.shm"
sl run gone --policy "$O" --store "$R" --manual-clock 0 -- no-such-command-sluice
want "run, command not found" 127
grep -q 'no-such-command-sluice: command not found' "$tmp/err" || fail "run, not found: $(cat "$tmp/err")"
sl run gone --policy "$O" --store "$R" --manual-clock 0 -- "$tmp/no-such-file"
want "run, no such file" 127
printf '#!/bin/sh\nexit 0\n' >"$tmp/not-exec" && chmod 644 "$tmp/not-exec"
sl run gone --policy "$O" --store "$R" --manual-clock 0 -- "$tmp/not-exec"
want "run, not executable" 126
sl run gone --policy "$O" --store "$R" --manual-clock 0 -- "$tmp"
want "run, a directory" 126
sl check gone --policy "$O" --store "$R" --manual-clock 0
want "run counted nothing for a command that cannot run" 0 "allowed remaining=0 reset_ms=60000"

bad "run, no --" "unexpected argument 'true': the command comes after '--'" run x --policy "$O" --store "$B" true
bad "run, no command" "missing COMMAND" run x --policy "$O" --store "$B" --
bad "run, no KEY" 'missing KEY' run --policy "$O" --store "$B" -- true
bad "run, bad SPEC" 'bad --policy SPEC' run x --policy 'fixed-window' --store "$B" -- true
bad "run, cost above" 'above 1' run x --policy "$O" --store "$B" --cost 2 -- true
bad "run, bad --wait" '--wait=2x: expected a duration' run x --policy "$O" --store "$B" --wait=2x -- true
bad "run, --wait TIMEOUT" "a timeout is written --wait=TIMEOUT" run x --policy "$O" --store "$B" --wait 2s -- true
bad "run, --json" "unknown option '--json'" run x --policy "$O" --store "$B" --json -- true
[[ -e "$tmp/bad.shm" ]] && fail "run's bad arguments created the store file"
sl run x --policy "$O" --store "$B" --cost 2 -- touch "$tmp/ran-bad"
[[ -e "$tmp/ran-bad" ]] && fail "run with bad arguments ran the command"

# ---- pipe: what goes in comes out -------------------------------------------------
# Text: lines of many lengths, an empty line, and a last line without a newline.
awk 'BEGIN { for (i = 0; i < 3000; i++) { s = ""; for (j = 0; j < i % 97; j++) s = s "x"; print i " " s }
             print ""; printf "last line, no newline" }' >"$tmp/text"
# Binary: NUL bytes, CRs, no trailing newline, and more than one read buffer.
{
    printf 'a\0b\n\0\0\r\nc'
    head -c 150000 /dev/urandom
    printf '\0end\0'
} >"$tmp/bin"
printf '' >"$tmp/empty"
n=0
for input in text bin empty; do
    for unit in lines bytes; do
        for spec in 'token-bucket capacity=5000 rate=5000/s' 'fixed-window limit=7 window=1s' \
            'leaky-bucket capacity=3 rate=50/s; sliding-window limit=100 window=1s'; do
            n=$((n + 1))
            "$SLUICE_BIN" pipe --policy "$spec" --unit "$unit" --store "shm:$tmp/pipe$n.shm" --manual-clock 0 \
                <"$tmp/$input" >"$tmp/piped" 2>"$tmp/err"
            rc=$?
            [[ $rc -eq 0 ]] || fail "pipe $input --unit $unit '$spec': exited $rc: $(cat "$tmp/err")"
            cmp -s "$tmp/$input" "$tmp/piped" || fail "pipe $input --unit $unit '$spec': output differs from input"
        done
    done
done
# The real clock, a rate that never waits, input from a pipe.
# shellcheck disable=SC2002 # a pipe on purpose: reads return what is there
cat "$tmp/bin" | "$SLUICE_BIN" pipe --policy 'token-bucket capacity=1000000 rate=1000000/s' --unit bytes \
    --store "shm:$tmp/pipe-real.shm" >"$tmp/piped" 2>"$tmp/err"
rc=$?
[[ $rc -eq 0 ]] || fail "pipe, real clock: exited $rc: $(cat "$tmp/err")"
cmp -s "$tmp/bin" "$tmp/piped" || fail "pipe, real clock: output differs from input"

# ---- pipe: pacing, exactly as the policy decides -----------------------------
# trace NAME WANT ARGS...: pipes $tmp/in through sluice pipe ARGS with a trace
# file; the output equals the input and the trace is WANT (lines joined by ';').
trace() {
    local name=$1 want_trace=$2
    shift 2
    "$SLUICE_BIN" pipe "$@" --trace-file "$tmp/trace" <"$tmp/in" >"$tmp/piped" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 0 ]] || fail "$name: exited $rc: $(cat "$tmp/err")"
    cmp -s "$tmp/in" "$tmp/piped" || fail "$name: output differs from input"
    local got
    got=$(tr '\n' ';' <"$tmp/trace")
    [[ "$got" == "$want_trace" ]] || fail "$name: trace is '$got', want '$want_trace'"
}
# Token bucket, capacity 2 at 1/s, 6 lines, one request per line: two at t=0
# (the full bucket), then one token a second.
printf 'one\ntwo\nthree\nfour\nfive\nsix' >"$tmp/in"
TB='token-bucket capacity=2 rate=1/s'
trace "pipe lines, token bucket" 't=0 units=1;t=0 units=1;t=1000 units=1;t=2000 units=1;t=3000 units=1;t=4000 units=1;' \
    --policy "$TB" --store "shm:$tmp/t1.shm" --manual-clock 0
# The pipe's state is in the store, under the key "pipe": its TAT went 1000,
# 2000, then +1000 a line to 6000, so at t=4000 the backlog is 2000 (tau: an
# empty bucket) and a check waits 1000 ms; another --key starts full.
sl check pipe --policy "$TB" --store "shm:$tmp/t1.shm" --manual-clock 4000
want "check after pipe" 1 "denied retry_after_ms=1000 remaining=0 reset_ms=2000"
trace "pipe --key other" 't=4000 units=1;t=4000 units=1;t=5000 units=1;t=6000 units=1;t=7000 units=1;t=8000 units=1;' \
    --policy "$TB" --store "shm:$tmp/t1.shm" --manual-clock 4000 --key other
# Bytes: "abcdef" in one read. t=0: 2 bytes (the most the bucket holds);
# then the bucket is empty, so each later byte waits for its token.
printf 'abcdef' >"$tmp/in"
trace "pipe bytes, token bucket" 't=0 units=2;t=1000 units=1;t=2000 units=1;t=3000 units=1;t=4000 units=1;' \
    --policy "$TB" --unit bytes --store "shm:$tmp/t2.shm" --manual-clock 0
# Fixed window of 4 per second from t=500, 10 bytes: 4 at t=500; the window
# is used up, so the next byte waits for t=1000, where 3 more are admitted at
# once (4 in that window); the last 2 go at t=2000 (1 waited for, then 1).
printf '0123456789' >"$tmp/in"
trace "pipe bytes, fixed window" 't=500 units=4;t=1000 units=1;t=1000 units=3;t=2000 units=1;t=2000 units=1;' \
    --policy 'fixed-window limit=4 window=1s' --unit bytes --store "shm:$tmp/t3.shm" --manual-clock 500
# The same input as lines: one line, one request.
printf 'a\n\nb\nc\nd\ne' >"$tmp/in"
trace "pipe lines, fixed window" 't=500 units=1;t=500 units=1;t=500 units=1;t=500 units=1;t=1000 units=1;t=1000 units=1;' \
    --policy 'fixed-window limit=4 window=1s' --store "shm:$tmp/t4.shm" --manual-clock 500
# Leaky bucket, capacity 2 at 1/s: admitted at once but with a delay (the
# queue ahead), which the pipe waits before writing: one line a second.
#  t=0: b=0, delay 0.  t=0: b=1000, delay 1000 -> written at 1000.
#  t=1000: TAT 2000, b=1000: delay 1000 -> 2000.  t=2000: likewise -> 3000.
printf 'w\nx\ny\nz\n' >"$tmp/in"
trace "pipe lines, leaky bucket" 't=0 units=1;t=1000 units=1;t=2000 units=1;t=3000 units=1;' \
    --policy "$L" --store "shm:$tmp/t5.shm" --manual-clock 0
# Empty input: nothing released.
printf '' >"$tmp/in"
trace "pipe, empty input" '' --policy "$TB" --store "shm:$tmp/t6.shm" --manual-clock 0

# ---- pipe: bad arguments read nothing ----------------------------------------
pipe_bad() {
    local name=$1 pattern=$2
    shift 2
    printf 'data\n' | "$SLUICE_BIN" pipe "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [[ $rc -eq 2 ]] || fail "$name: exited $rc, want 2"
    [[ -s "$tmp/out" ]] && fail "$name: wrote to stdout: $(cat -v "$tmp/out")"
    grep -Eq -- "$pattern" "$tmp/err" || fail "$name: stderr does not match /$pattern/: $(cat -v "$tmp/err")"
}
pipe_bad "pipe, no --policy" 'missing --policy' --store "$B"
pipe_bad "pipe, bad --unit" "--unit 'words': expected lines or bytes" --policy "$TB" --unit words --store "$B"
pipe_bad "pipe, argument" "unexpected argument 'extra'" extra --policy "$TB" --store "$B"
pipe_bad "pipe, bad SPEC" 'bad --policy SPEC' --policy 'token-bucket capacity=2' --store "$B"
pipe_bad "pipe, --cost" "unknown option '--cost'" --policy "$TB" --cost 2 --store "$B"
pipe_bad "pipe, empty --key" 'KEY is 0 bytes' --policy "$TB" --key= --store "$B"
pipe_bad "pipe, bad --trace-file" "--trace-file $tmp/no/such/trace" --policy "$TB" --store "shm:$tmp/t7.shm" \
    --trace-file "$tmp/no/such/trace"
[[ -e "$tmp/bad.shm" ]] && fail "pipe's bad arguments created the store file"

# ---- a closed standard output: the documented status, not SIGPIPE (141) -----
# closed_out ARGS...: runs sluice ARGS with $tmp/in on stdin and a stdout
# whose reader has gone (a pipe with its read end closed: every write fails
# with EPIPE, deterministically); sets rc (128+N for a signal N), $tmp/err.
closed_out() {
    rc=$(python3 -c '
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
with open(sys.argv[1], "w") as err:
    p = subprocess.run(sys.argv[2:], stdout=w, stderr=err)  # SIGPIPE as the shell leaves it
print(p.returncode if p.returncode >= 0 else 128 - p.returncode)' "$tmp/err" "$SLUICE_BIN" "$@" <"$tmp/in")
}
if python3 -c 'import subprocess' >/dev/null 2>&1; then
    C="shm:$tmp/closed.shm"
    : >"$tmp/in"
    # check: exit 2 (writing the decision failed), and the request counted
    closed_out check k --policy "$O" --store "$C" --manual-clock 0
    [[ $rc -eq 2 ]] || fail "check into a closed pipe: exit $rc, want 2"
    grep -q 'sluice check: writing standard output: Broken pipe' "$tmp/err" ||
        fail "check into a closed pipe: stderr: $(cat "$tmp/err")"
    sl check k --policy "$O" --store "$C" --manual-clock 0
    want "check into a closed pipe counted the request" 1 "denied retry_after_ms=60000 remaining=0 reset_ms=60000"
    closed_out check k --policy "$O" --store "$C" --manual-clock 0 --json
    [[ $rc -eq 2 ]] || fail "check --json into a closed pipe: exit $rc, want 2"
    # peek, refund, reset: 2, as check
    for v in peek refund reset; do
        closed_out "$v" k --policy "$O" --store memory: $([[ $v == refund ]] && echo --cost 1)
        [[ $rc -eq 2 ]] || fail "$v into a closed pipe: exit $rc, want 2"
        grep -q "sluice $v: writing standard output: Broken pipe" "$tmp/err" ||
            fail "$v into a closed pipe: stderr: $(cat "$tmp/err")"
    done
    # stats: 1 (writing failed)
    closed_out stats --store "$C"
    [[ $rc -eq 1 ]] || fail "stats into a closed pipe: exit $rc, want 1"
    # pipe: 1, quietly (the reader went away, as with | head)
    seq 100000 >"$tmp/in"
    closed_out pipe --policy "$TB" --store "$C" --manual-clock 0
    [[ $rc -eq 1 ]] || fail "pipe into a closed pipe: exit $rc, want 1"
    [[ -s "$tmp/err" ]] && fail "pipe into a closed pipe wrote to stderr: $(cat "$tmp/err")"
    # simulate: 1, quietly
    awk '{ print $1, "k" }' "$tmp/in" >"$tmp/trace.in" && mv "$tmp/trace.in" "$tmp/in"
    closed_out simulate 'fixed-window limit=5 window=1s'
    [[ $rc -eq 1 ]] || fail "simulate into a closed pipe: exit $rc, want 1"
    [[ -s "$tmp/err" ]] && fail "simulate into a closed pipe wrote to stderr: $(cat "$tmp/err")"
    # demo, version, help: 1
    : >"$tmp/in"
    for cmd in demo version help; do
        closed_out "$cmd"
        [[ $rc -eq 1 ]] || fail "$cmd into a closed pipe: exit $rc, want 1"
    done
    # run restores SIGPIPE for the command it runs: a command that writes
    # into the closed pipe dies of it as it would without sluice
    # (one that ignored it would see echo fail: exit 7)
    closed_out run r --policy "$W" --store "$C" -- sh -c 'for i in 1 2 3; do echo y || exit 7; done'
    [[ $rc -eq 141 ]] || fail "run: the command's SIGPIPE: exit $rc, want 141"
fi
# The pipeline of the man page: head takes one line and leaves.
seq 100000 | "$SLUICE_BIN" pipe --policy 'token-bucket capacity=1000000 rate=1000000/s' \
    --store "shm:$tmp/head.shm" 2>"$tmp/err" | head -1 >"$tmp/out"
statuses=("${PIPESTATUS[@]}")
[[ ${statuses[1]} -eq 1 ]] || fail "seq | sluice pipe | head -1: sluice exited ${statuses[1]}, want 1"
[[ "$(cat "$tmp/out")" == 1 ]] || fail "seq | sluice pipe | head -1 printed '$(cat "$tmp/out")'"

# ---- the man page and the demonstration ------------------------------------------
man1=$src/docs/sluice.1
if [[ ! -f $man1 ]]; then
    fail "no man page $man1"
else
    for cmd in check peek refund reset run pipe stats simulate demo; do
        grep -q "^\\.SS.*$cmd" "$man1" || fail "the man page has no section for $cmd"
    done
    for sec in NAME SYNOPSIS DESCRIPTION 'EXIT STATUS' ENVIRONMENT FILES EXAMPLES; do
        grep -q "^\\.SH \"*$sec" "$man1" || fail "the man page has no $sec section"
    done
    if command -v groff >/dev/null 2>&1; then
        groff -man -Tutf8 -ww -z "$man1" >"$tmp/groff" 2>&1 || fail "groff fails on the man page: $(cat "$tmp/groff")"
        [[ -s "$tmp/groff" ]] && fail "groff warns about the man page: $(head -5 "$tmp/groff")"
    fi
fi
if [[ -f $src/docs/cli-demo.sh ]]; then
    sh "$src/docs/cli-demo.sh" "$SLUICE_BIN" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want "docs/cli-demo.sh" 0
    # (it runs once more in the rare case that a minute's window ends during it)
    grep -E '^(allowed|denied) ' "$tmp/out" | tail -3 | cut -d' ' -f1,2 | cut -d= -f1 | tr '\n' ';' >"$tmp/demo"
    [[ "$(cat "$tmp/demo")" == 'allowed remaining;allowed remaining;denied retry_after_ms;' ]] ||
        fail "cli-demo: not two allowed then a denial with its retry time: $(cat "$tmp/out")"
else
    fail "no docs/cli-demo.sh"
fi

cli_test_end
