// go_rate.go: Go's golang.org/x/time/rate in the cases `make bench-peers`
// sets beside sluice's (bench/peers/sluice_cases.c has the same workloads).
//
//	make bench-peers           builds and runs it (bench/peers/run.sh)
//	./build/peers/go_rate      this one alone, after that
//
// Built offline against Debian's golang-golang-x-time-dev, in GOPATH mode:
// GO111MODULE=off GOPATH=/usr/share/gocode (run.sh does it).
//
// Timing, as sluice's benches: wall ns per decision (time.Now, monotonic);
// a pilot doubles N until a run takes 5 ms and sizes a run to ~60 ms, one
// run warms up (and sizes the runs instead when it was faster than the
// pilot), 9 runs are timed; "ns/op" is their median, "min" the
// fastest, "spread" (slowest - fastest) / median. One goroutine; the timed
// loops allocate nothing, and the setup's garbage is collected before them.
//
// Every limiter is rate.NewLimiter(1e9, 1e9): 10^9 tokens per s, burst 10^9
// (finite: rate.Inf would skip the arithmetic), so every decision is on the
// allow path; each run counts the decisions allowed and the program exits 1
// unless that is every one.
//
// Cases (the first word of a result line is the name run.sh reads):
//
//	go_allow     one limiter, Allow(): reads its clock (time.Now) itself.
//	go_allow_n   one limiter, AllowN(t, 1) with t taken once per run (an
//	             event loop's turn).
//	go_map_1k    a map[string]*rate.Limiter behind one sync.Mutex, 1,000 and
//	go_map_1m    1,000,000 keys: per decision lock, look up, Allow(), unlock.
//	             Keys are 16 bytes, "user:00000000042"; the map is prefilled
//	             (each limiter allowed once) with keys of its own, and the
//	             lookups take substrings of one string of all keys, so a
//	             lookup key is not the map's own string (as a key parsed from
//	             a request is not) and costs no allocation. 2^21 indices drawn
//	             uniformly at random (splitmix64, fixed seed) are precomputed,
//	             each run going on where the last one stopped.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	runNs    = 60e6 // one timed run
	pilotNs  = 5e6  // the pilot that sizes N
	nRuns    = 9
	keyLen   = 16
	orderLen = 1 << 21 // indices per order, a power of two
)

var failed bool // a decision was denied: exit 1

func newLimiter() *rate.Limiter {
	return rate.NewLimiter(1e9, 1e9)
}

// measure times work(n), which runs n decisions and returns how many were
// allowed, and prints the case's line.
func measure(name string, work func(n int) int) {
	ops, allowed := 0, 0
	timed := func(n int) float64 {
		t0 := time.Now()
		allowed += work(n)
		ops += n
		return float64(time.Since(t0).Nanoseconds())
	}
	n := 256
	var t float64
	for {
		t = timed(n)
		if t >= pilotNs || n >= 1<<40 {
			break
		}
		n *= 2
	}
	if t < 1 {
		t = 1
	}
	per := t / float64(n)
	n = int(runNs / per)
	if n < 1 {
		n = 1
	}
	// the warm-up run; when it ran faster than the pilot, it sizes the runs
	// instead (a pilot that the shared host stopped for a while sizes them
	// too short)
	if w := timed(n); w > 0 && w/float64(n) < per {
		n = int(runNs / (w / float64(n)))
	}
	if n < 1 {
		n = 1
	}
	v := make([]float64, nRuns)
	for i := range v {
		v[i] = timed(n) / float64(n)
	}
	sort.Float64s(v)
	med := v[nRuns/2]
	fmt.Printf("%-18s %8.2f ns/op  min %8.2f  spread %5.1f%%  %d decisions, %d denied\n",
		name, med, v[0], 100*(v[nRuns-1]-v[0])/med, ops, ops-allowed)
	if allowed != ops {
		failed = true
	}
}

// splitmix64: a fixed seed, so every run draws the same order.
func rngNext(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// a uniform draw from 0..n-1
func draw(s *uint64, n uint32) uint32 {
	return uint32(((rngNext(s) >> 32) * uint64(n)) >> 32)
}

func key(i int) string {
	return fmt.Sprintf("user:%011d", i)
}

type keyed struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	keys  string   // every key, keyLen bytes each
	order []uint32 // orderLen key indices
	pos   uint32   // where the next run goes on in order
}

func newKeyed(nKeys int) *keyed {
	k := &keyed{m: make(map[string]*rate.Limiter, nKeys)}
	all := make([]byte, 0, nKeys*keyLen)
	for i := 0; i < nKeys; i++ {
		l := newLimiter()
		l.Allow()
		k.m[key(i)] = l
		all = append(all, key(i)...)
	}
	k.keys = string(all)
	k.order = make([]uint32, orderLen)
	rng := uint64(0x5eed) + uint64(nKeys)
	for i := range k.order {
		k.order[i] = draw(&rng, uint32(nKeys))
	}
	return k
}

func (k *keyed) run(n int) int {
	allowed, pos := 0, k.pos
	for i := 0; i < n; i++ {
		j := int(k.order[pos]) * keyLen
		pos = (pos + 1) & (orderLen - 1)
		k.mu.Lock()
		ok := k.m[k.keys[j:j+keyLen]].Allow()
		k.mu.Unlock()
		if ok {
			allowed++
		}
	}
	k.pos = pos
	return allowed
}

func main() {
	fmt.Printf("# go_rate: %s, golang.org/x/time/rate from /usr/share/gocode, GOMAXPROCS %d; "+
		"limiters 1e9 per s, burst 1e9; median of %d runs of ~%.0f ms\n",
		runtime.Version(), runtime.GOMAXPROCS(0), nRuns, runNs/1e6)

	one := newLimiter()
	measure("go_allow", func(n int) int {
		allowed := 0
		for i := 0; i < n; i++ {
			if one.Allow() {
				allowed++
			}
		}
		return allowed
	})
	one = newLimiter()
	measure("go_allow_n", func(n int) int {
		allowed, now := 0, time.Now()
		for i := 0; i < n; i++ {
			if one.AllowN(now, 1) {
				allowed++
			}
		}
		return allowed
	})
	for _, c := range []struct {
		name  string
		nKeys int
	}{{"go_map_1k", 1000}, {"go_map_1m", 1000000}} {
		k := newKeyed(c.nKeys)
		runtime.GC() // the setup's garbage, before timing
		fmt.Printf("# %s: %d keys in the map\n", c.name, len(k.m))
		measure(c.name, k.run)
	}
	if failed {
		os.Exit(1)
	}
}
