/* bench/bench_decode.c: decode-sized q_matmul called one after another with the calling thread
 * busy between calls, for two idle spins of the CPU pool (ember_options.cpu_spin_us): the
 * default and a longer one, side by side in the same run.
 *
 * An engine decoding a token calls one small q_matmul after another (M = 1 or a few rows against
 * K x N weights) and does other work on its own thread between them (norms, attention, sampling).
 * When that gap is longer than the pool's idle spin, the worker has gone to sleep and the next
 * call wakes it, which costs tens of microseconds on a VM. This bench measures the call time
 * against the gap for each spin, and what the spin costs: the CPU time the process used beyond
 * the calling thread's own, per call (the worker's work and its polling).
 *
 * Per shape and gap, the two contexts run in alternating rounds (each round: CALLS = 16 calls on
 * one context, the caller spinning `gap` us before each; then 2 ms asleep, so that a spinning
 * worker stops before the other context's round). The weights are Q8S per tensor, packed by the
 * warm-up (the cached path), the activations Q8S; the calls go through the public API
 * (ember_q_matmul, the output allocated per call). Reported: median us per call over all calls of
 * all rounds, GOPS (2mnk / call), the long spin's speed over the default's, and the other
 * threads' CPU us per call.
 *
 * OpenBLAS's and OpenMP's idle spins are shortened as in the other benches (blas_coretype.h).
 *
 * Usage: bench_decode [--json] [--reps N] [--spin US] [--shape M,N,K]... [--gap US]...
 * Defaults: shapes 1 x 4096 x 4096 and 8 x 4096 x 4096, gaps 0, 30 and 100 us, long spin 250 us,
 * 7 rounds of 16 calls per context. */
#include "bench_common.h"

#define MAX_SHAPES 8
#define MAX_GAPS 8
#define CALLS 16

static double now_us(void) { return bench_now_ms() * 1e3; }

/* CPU microseconds on clock id: CLOCK_PROCESS_CPUTIME_ID (every thread) or
 * CLOCK_THREAD_CPUTIME_ID (the calling thread) */
static double cpu_us(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void busy_us(double us) {
    const double t0 = now_us();
    while (now_us() - t0 < us) {
    }
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* one context with its operands */
typedef struct side {
    long long spin_us;
    ember_context *ctx;
    ember_tensor *qa, *qb;
    double *call_us; /* reps * CALLS samples */
    double other_cpu_us;
} side;

static int side_setup(side *s, long long spin_us, int64_t m, int64_t n, int64_t k, const float *a,
                      const float *b, int reps) {
    memset(s, 0, sizeof *s);
    s->spin_us = spin_us;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_spin_us = spin_us;
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int64_t sa[] = {m, k}, sb[] = {k, n};
    const ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *x = NULL, *w = NULL;
    int ok = ember_context_create(&o, &s->ctx) == EMBER_OK &&
             ember_tensor_from_data(s->ctx, cpu, EMBER_F32, 2, sa, a, &x) == EMBER_OK &&
             ember_tensor_from_data(s->ctx, cpu, EMBER_F32, 2, sb, b, &w) == EMBER_OK &&
             ember_quantize(x, &q8, &s->qa) == EMBER_OK &&
             ember_quantize(w, &q8, &s->qb) == EMBER_OK;
    ember_tensor_free(x);
    ember_tensor_free(w);
    s->call_us = malloc((size_t)reps * CALLS * sizeof *s->call_us);
    if (!ok || !s->call_us) {
        fprintf(stderr, "bench_decode: setup (spin %lld us): %s\n", spin_us,
                s->call_us ? ember_last_error() : "out of memory");
        return 0;
    }
    return 1;
}

static void side_free(side *s) {
    ember_tensor_free(s->qa);
    ember_tensor_free(s->qb);
    if (s->ctx)
        ember_context_destroy(s->ctx);
    free(s->call_us);
}

/* one call, timed; the output freed untimed */
static int call_once(side *s, double *us) {
    ember_tensor *c = NULL;
    const double t0 = now_us();
    const ember_status st = ember_q_matmul(s->qa, s->qb, &c);
    *us = now_us() - t0;
    ember_tensor_free(c);
    if (st != EMBER_OK) {
        fprintf(stderr, "bench_decode: ember_q_matmul: %s\n", ember_last_error());
        return 0;
    }
    return 1;
}

/* round r: CALLS calls, each after `gap` us of the caller's own work, then 2 ms asleep. The
 * other threads' CPU time is read after the sleep: it then includes the worker's spin after the
 * last call (a cost of the spin), and the worker has gone to sleep, so that its time is up to date
 * (a running thread's CPU time is brought up to date only now and then). */
static int side_round(side *s, int r, double gap) {
    const double p0 = cpu_us(CLOCK_PROCESS_CPUTIME_ID), t0 = cpu_us(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < CALLS; i++) {
        busy_us(gap);
        if (!call_once(s, &s->call_us[r * CALLS + i]))
            return 0;
    }
    const double caller = cpu_us(CLOCK_THREAD_CPUTIME_ID) - t0;
    sleep_ms(2);
    s->other_cpu_us += (cpu_us(CLOCK_PROCESS_CPUTIME_ID) - p0) - caller;
    return 1;
}

static int parse_shape(const char *v, int64_t *m, int64_t *n, int64_t *k) {
    long long a, b, c;
    char tail;
    if (sscanf(v, "%lld,%lld,%lld%c", &a, &b, &c, &tail) != 3 || a < 1 || b < 1 || c < 1 ||
        a > 4096 || b > 65536 || c > 65536)
        return 0;
    *m = a;
    *n = b;
    *k = c;
    return 1;
}

int main(int argc, char **argv) {
    /* OpenBLAS (linked, unused here) keeps a thread polling for its first ~0.1 s unless told
     * otherwise: a whole CPU beside the first rounds, which the CPU column would charge to
     * ember's spin */
    ember_tool_bench_env(argv, openblas_get_corename());
    int json = 0, reps = 7;
    long long spin = 250;
    int64_t shp[MAX_SHAPES][3];
    int nshapes = 0, ngaps = 0;
    double gaps[MAX_GAPS];
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--reps") && more) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 100) {
                fprintf(stderr, "bench_decode: --reps wants 1..100\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--spin") && more) {
            spin = atoll(argv[++i]);
            if (spin < 0 || spin > EMBER_CPU_SPIN_US_MAX) {
                fprintf(stderr, "bench_decode: --spin wants 0..%d us\n", EMBER_CPU_SPIN_US_MAX);
                return 2;
            }
        } else if (!strcmp(argv[i], "--shape") && more && nshapes < MAX_SHAPES) {
            if (!parse_shape(argv[++i], &shp[nshapes][0], &shp[nshapes][1], &shp[nshapes][2])) {
                fprintf(stderr, "bench_decode: --shape wants M,N,K (M <= 4096, N, K <= 65536)\n");
                return 2;
            }
            nshapes++;
        } else if (!strcmp(argv[i], "--gap") && more && ngaps < MAX_GAPS) {
            gaps[ngaps] = atof(argv[++i]);
            if (!(gaps[ngaps] >= 0 && gaps[ngaps] <= 1e6)) {
                fprintf(stderr, "bench_decode: --gap wants 0..1000000 us\n");
                return 2;
            }
            ngaps++;
        } else {
            fprintf(stderr,
                    "usage: bench_decode [--json] [--reps N] [--spin US] [--shape M,N,K]... "
                    "[--gap US]...\n");
            return 2;
        }
    }
    if (!nshapes) {
        const int64_t d[2][3] = {{1, 4096, 4096}, {8, 4096, 4096}};
        memcpy(shp, d, sizeof d);
        nshapes = 2;
    }
    if (!ngaps) {
        const double d[3] = {0, 30, 100};
        memcpy(gaps, d, sizeof d);
        ngaps = 3;
    }
    const long long spins[2] = {EMBER_CPU_SPIN_US_DEFAULT, spin};
    ember_device_info info;
    memset(&info, 0, sizeof info);
    {
        ember_context *c = NULL;
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        if (ember_context_create(&o, &c) != EMBER_OK) {
            fprintf(stderr, "bench_decode: %s\n", ember_last_error());
            return 1;
        }
        ember_device_describe(c, (ember_device){EMBER_BACKEND_CPU, 0}, &info);
        ember_context_destroy(c);
    }
    if (json)
        printf(
            "{\"bench\": \"decode\", \"path\": \"%s\", \"threads\": %d, \"calls_per_round\": %d, "
            "\"rounds\": %d, \"rows\": [",
            info.int8_matmul_path, info.compute_units, CALLS, reps);
    else
        printf("# bench_decode: ember_q_matmul (public API), Q8S x Q8S per tensor, weights packed; "
               "%s, %d threads; the caller busy `gap` us before each call; %d rounds of %d calls "
               "per context, alternated; medians\n"
               "shape M,N,K      gap_us  spin_us   us/call     GOPS  vs_default  "
               "other_cpu_us/call\n",
               info.int8_matmul_path, info.compute_units, reps, CALLS);
    int first = 1, rc = 0;
    for (int si = 0; si < nshapes && !rc; si++) {
        const int64_t m = shp[si][0], n = shp[si][1], k = shp[si][2];
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        side sd[2];
        memset(sd, 0, sizeof sd);
        if (!a || !b) {
            fprintf(stderr, "bench_decode: out of memory\n");
            free(a);
            free(b);
            return 1;
        }
        bench_fill(a, (size_t)(m * k), 11);
        bench_fill(b, (size_t)(k * n), 12);
        int ok = side_setup(&sd[0], spins[0], m, n, k, a, b, reps) &&
                 side_setup(&sd[1], spins[1], m, n, k, a, b, reps);
        for (int g = 0; g < ngaps && ok; g++) {
            for (int q = 0; q < 2 && ok; q++) { /* warm-up: packs the weights, fills caches */
                double us;
                for (int i = 0; i < 3 && ok; i++)
                    ok = call_once(&sd[q], &us);
                sd[q].other_cpu_us = 0;
            }
            for (int r = 0; r < reps && ok; r++)
                for (int q = 0; q < 2 && ok; q++) {
                    const int which = (r % 2) ? 1 - q : q; /* alternate who goes first */
                    ok = side_round(&sd[which], r, gaps[g]);
                }
            if (!ok)
                break;
            double med[2];
            for (int q = 0; q < 2; q++) {
                double mn;
                bench_stats(sd[q].call_us, reps * CALLS, &med[q], &mn);
            }
            for (int q = 0; q < 2; q++) {
                const double gops = 2.0 * (double)m * (double)n * (double)k / med[q] * 1e-3;
                const double other = sd[q].other_cpu_us / (reps * CALLS);
                if (json)
                    printf("%s\n  {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"gap_us\": %.0f, "
                           "\"spin_us\": %lld, \"us_per_call\": %.1f, \"gops\": %.1f, "
                           "\"vs_default\": %.3f, \"other_cpu_us_per_call\": %.1f}",
                           first ? "" : ",", (long long)m, (long long)n, (long long)k, gaps[g],
                           spins[q], med[q], gops, med[0] / med[q], other);
                else
                    printf("%lld,%lld,%lld  %9.0f  %7lld  %8.1f  %7.1f  %10.2f  %17.1f\n",
                           (long long)m, (long long)n, (long long)k, gaps[g], spins[q], med[q],
                           gops, med[0] / med[q], other);
                first = 0;
            }
            fflush(stdout);
        }
        if (!ok)
            rc = 1;
        for (int q = 0; q < 2; q++)
            side_free(&sd[q]);
        free(a);
        free(b);
    }
    if (json)
        printf("\n]}\n");
    return rc;
}
