/* GuavaRate.java: Guava's RateLimiter.tryAcquire() in the case `make
 * bench-peers` sets beside sluice_acquire (bench/peers/sluice_cases.c).
 *
 *   make bench-peers     builds and runs it (bench/peers/run.sh)
 *   java -cp build/peers:/usr/share/java/guava.jar GuavaRate
 *
 * One limiter, RateLimiter.create(1e9): 10^9 permits per s, a burst of one
 * second's worth; tryAcquire() reads its own clock (a Stopwatch on
 * System.nanoTime) and decides under the limiter's monitor. Nothing is
 * ever denied: a permit's interval (0.001 us) rounds to a wait of 0 us.
 * Each run counts the permits granted; the program exits 1 unless that is
 * every call.
 *
 * JIT: before anything is timed, the loop that is timed runs for WARM_S
 * seconds in calls of 100,000 (enough for C2 to compile it, tryAcquire
 * inlined, and for the figure to settle: the lines "# warm-up" show it
 * per second). Then the timing of sluice's benches: a pilot doubles N until
 * a run takes 5 ms and sizes a run to ~60 ms, one run warms up (and sizes
 * the runs instead when it was faster than the pilot), 9 runs are timed;
 * "ns/op" is their median, "min" the fastest, "spread" (slowest - fastest)
 * / median. Wall time by System.nanoTime; one thread; the loop allocates
 * nothing, so no collection runs while it is timed.
 *
 * Result line (the first word is the name run.sh reads): guava_try_acquire.
 */
import com.google.common.util.concurrent.RateLimiter;
import java.util.Arrays;
import java.util.Locale;

public final class GuavaRate {
    static final double RUN_NS = 60e6, PILOT_NS = 5e6;
    static final int N_RUNS = 9, WARM_S = 5;

    static long ops, allowed;

    /* the timed loop: n decisions, counting those allowed */
    static long work(RateLimiter l, long n) {
        long ok = 0;
        for (long i = 0; i < n; i++)
            if (l.tryAcquire()) ok++;
        return ok;
    }

    static long timed(RateLimiter l, long n) {
        long t0 = System.nanoTime();
        allowed += work(l, n);
        ops += n;
        return System.nanoTime() - t0;
    }

    public static void main(String[] args) {
        RateLimiter l = RateLimiter.create(1e9);
        System.out.printf(Locale.ROOT, "# GuavaRate: Java %s (%s), Guava RateLimiter.create(1e9); %d s of JIT warm-up, "
                + "median of %d runs of ~%.0f ms%n", System.getProperty("java.version"),
                System.getProperty("java.vm.name"), WARM_S, N_RUNS, RUN_NS / 1e6);

        long first = timed(l, 10000);
        System.out.printf(Locale.ROOT, "# warm-up: the first 10,000 calls: %.2f ns/op (interpreted, then compiled)%n",
                first / 1e4);
        for (int s = 1; s <= WARM_S; s++) {
            long n = 0, t = 0;
            while (t < 1_000_000_000L) {
                t += timed(l, 100_000);
                n += 100_000;
            }
            System.out.printf(Locale.ROOT, "# warm-up second %d: %.2f ns/op%n", s, (double) t / n);
        }

        long n = 256, t;
        for (;;) {
            t = timed(l, n);
            if (t >= PILOT_NS || n >= 1L << 40) break;
            n *= 2;
        }
        double per = (double) Math.max(t, 1) / n;
        n = Math.max(1, (long) (RUN_NS / per));
        long w = timed(l, n); /* the warm-up run; when faster than the pilot it sizes the runs */
        if (w > 0 && (double) w / n < per) n = Math.max(1, (long) (RUN_NS / ((double) w / n)));
        double[] v = new double[N_RUNS];
        for (int i = 0; i < N_RUNS; i++) v[i] = (double) timed(l, n) / n;
        Arrays.sort(v);
        double med = v[N_RUNS / 2];
        System.out.printf(Locale.ROOT, "%-18s %8.2f ns/op  min %8.2f  spread %5.1f%%  %d decisions, %d denied%n",
                "guava_try_acquire", med, v[0], 100 * (v[N_RUNS - 1] - v[0]) / med, ops, ops - allowed);
        if (allowed != ops) System.exit(1);
    }
}
