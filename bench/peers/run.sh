#!/bin/sh
# run.sh: `make bench-peers`. sluice beside two rate limiters of other
# languages, on the same cases, measured in one sitting, in one table.
#
#   make bench-peers                  deps-peers, build, then this
#   sh bench/peers/run.sh [BUILD]     this alone (BUILD: the build directory
#                                     of `make build`, default build)
#   ROUNDS=5 make bench-peers         more rounds (default 3; odd is best)
#
# It builds three harnesses into BUILD/peers/ (sluice_cases.c against
# BUILD/libsluice.a; go_rate.go in GOPATH mode against Debian's
# golang-golang-x-time-dev, offline; GuavaRate.java against Debian's
# guava.jar; each file's top comment says what it measures and how), then
# runs ROUNDS rounds, each running the three one after the other (sluice's
# first in odd rounds, last in even ones), and prints every figure and
# then the table: per case the median over the rounds of each harness's
# figure (itself a median of 9 timed runs), and
#
#   ratio = peer ns/op / sluice ns/op
#         = sluice's decisions per second as a multiple of the peer's
#           ("3.00x": sluice decides 3 times as many per second)
#
# with the range of the ratio from round to round (each round's pair ran a
# few seconds apart), and the issue's goals beside it as informational
# PASS/MISS: sluice_acquire >= 2.5x Guava's tryAcquire and >= 5x Go's
# Allow; sluice_store_acquire on memory: >= 4x Go's map of limiters at 1K
# keys and >= 3x at 1M. It exits 1 only when something fails to build or a
# harness errors (a decision left the allow path); never on speed.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build}
out=$build/peers
rounds=${ROUNDS:-3}
gopath=/usr/share/gocode        # golang-golang-x-time-dev
guava=/usr/share/java/guava.jar # libguava-java

for f in "$build/libsluice.a" "$gopath/src/golang.org/x/time/rate/rate.go" "$guava"; do
    if [ ! -e "$f" ]; then
        echo "run.sh: no $f (make build; make deps-peers)" >&2
        exit 1
    fi
done
for c in go javac java; do
    if ! command -v $c >/dev/null; then
        echo "run.sh: no $c on the PATH (make deps-peers)" >&2
        exit 1
    fi
done

mkdir -p "$out"
echo "== building into $out/"
${CC:-cc} -std=gnu11 -O2 -g -Wall -Wextra -Iinclude bench/peers/sluice_cases.c \
    "$build/libsluice.a" -pthread -lm -o "$out/sluice_cases"
GO111MODULE=off GOPATH=$gopath GOFLAGS= GOPROXY=off GOCACHE=$root/$out/go-cache \
    go build -o "$out/go_rate" bench/peers/go_rate.go
javac -d "$out" -cp "$guava" bench/peers/GuavaRate.java

# run NAME COMMAND...: one harness of round $r into $out/round-$r-NAME.txt
run() {
    name=$1
    shift
    if ! "$@" >"$out/round-$r-$name.txt"; then
        cat "$out/round-$r-$name.txt"
        echo "run.sh: $name failed (round $r)" >&2
        exit 1
    fi
    cat "$out/round-$r-$name.txt"
}
sluice() { run sluice "$out/sluice_cases"; }
peers() {
    run go "$out/go_rate"
    run guava java -cp "$out:$guava" GuavaRate
}

rm -f "$out"/round-*.txt
r=1
while [ "$r" -le "$rounds" ]; do
    echo
    echo "== round $r of $rounds"
    if [ $((r % 2)) = 1 ]; then sluice; peers; else peers; sluice; fi
    r=$((r + 1))
done

echo
echo "== sluice beside its peers: ns per decision, allow path, 1 thread; median of $rounds rounds"
echo "ratio = peer ns/op / sluice ns/op: sluice's decisions/s as a multiple of the peer's"
echo "(goals: informational; \"rounds\": the ratio's range from round to round)"
echo
awk -v rounds="$rounds" '
    # every result line: name, median ns/op, ...; the round from the file name
    FNR == 1 { n = split(FILENAME, p, "round-"); r = p[n] + 0 }
    $1 !~ /^#/ && $3 == "ns/op" { v[$1, r] = $2 }

    function median(a, n,    i, j, t) {
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function med_of(name,    i, a) {
        for (i = 1; i <= rounds; i++) a[i] = v[name, i]
        return median(a, rounds)
    }
    function row(label, s, peer, plabel, goal,    ms, mp, x, i, lo, hi, q, verdict) {
        ms = med_of(s); mp = med_of(peer); x = mp / ms
        for (i = 1; i <= rounds; i++) {
            q = v[peer, i] / v[s, i]
            if (i == 1 || q < lo) lo = q
            if (i == 1 || q > hi) hi = q
        }
        verdict = goal ? sprintf(">= %.1fx  %s", goal, x >= goal ? "PASS" : "MISS") : "(no goal)"
        printf "%-24s %8.2f  %-24s %8.2f  %6.2fx  %-12s  %s\n", label, ms, plabel, mp, x,
            sprintf("%.2f-%.2fx", lo, hi), verdict
    }
    END {
        printf "%-24s %8s  %-24s %8s  %7s  %-12s  %s\n", "sluice case", "ns/op", "peer", "ns/op", "ratio",
            "rounds", "goal"
        row("sluice_acquire", "sluice_acquire", "guava_try_acquire", "Guava tryAcquire()", 2.5)
        row("sluice_acquire", "sluice_acquire", "go_allow", "Go Allow()", 5)
        row("sluice_acquire_at", "sluice_acquire_at", "go_allow_n", "Go AllowN(t, 1)", 0)
        row("sluice_store_acquire 1K", "sluice_store_1k", "go_map_1k", "Go map+Mutex, Allow() 1K", 4)
        row("sluice_store_acquire 1M", "sluice_store_1m", "go_map_1m", "Go map+Mutex, Allow() 1M", 3)
    }
' "$out"/round-*-sluice.txt "$out"/round-*-go.txt "$out"/round-*-guava.txt
echo
echo "(every round's output: $out/round-*.txt)"
