/* tests/test_threads.c: 8 threads share one context and run a mix of quantize / q_matmul /
 * to_device / dequantize / free on the CPU and on OpenCL device 0 (when there is one) for a
 * bounded time, on shared inputs (the documented contract: one context may be shared by threads,
 * distinct threads may use the same input tensors at once, no op mutates its inputs).
 *
 * Every result is compared with the one computed single-threaded before the threads start:
 * exactly for the integer q_matmul arm, quantize's bytes and moved data, to a tolerance for the
 * float arms. Each thread also provokes a guard failure now and then and checks that
 * ember_last_error() holds its own detail (the error slot is per thread), and makes and destroys
 * a private context while the others work on the shared one. Shared quantized weights
 * fill their pre-packed caches concurrently. At the end every tensor is freed and ember's
 * live-block count is back where it was.
 *
 * EMBER_THREADS_SECONDS sets the run time (default 2; CTest runs it so, the TSan build runs it
 * longer: tsan.mk). Prints threads x seconds and the number of calls made. Built and run under
 * ThreadSanitizer by `make tsan` (tsan.mk). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch/internal.h"
#include "test_util.h"

#define NTHREADS 8
#define M 8
#define K 64
#define N 32

static ember_context *ctx;
static int ndev; /* devices in play: cpu:0, then opencl:0 */
static ember_device devs[2];

/* shared inputs, per device, and the results computed before the threads start */
static ember_tensor *X[2], *W[2], *XQ[2], *WB[2]; /* x [M,K] f32, w [K,N] Q8S, xq, w per-block */
static float ref_qq[M * N], ref_fq[M * N], ref_fb[M * N];
static unsigned char *ref_wbytes;
static size_t ref_wlen;
static float xhost[M * K];
static double seconds = 2.0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int read_f32(const ember_tensor *t, float *dst, size_t n) {
    return ember_tensor_read(t, dst, n * sizeof *dst) == EMBER_OK;
}

static int close_to(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > 1e-4f * (1.0f + fabsf(b[i])))
            return 0;
    return 1;
}

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.num_threads = 2;
    if (ember_context_create(&o, &ctx) != EMBER_OK)
        return 1;
    const char *e = getenv("EMBER_THREADS_SECONDS");
    if (e && atof(e) > 0)
        seconds = atof(e);
    devs[0] = TU_CPU;
    ndev = 1;
    if (ember_device_count(ctx, EMBER_BACKEND_OPENCL) > 0)
        devs[ndev++] = (ember_device){EMBER_BACKEND_OPENCL, 0};
    uint64_t rng = tu_seed() ^ 0x7417;
    float w[K * N];
    tu_rand_f32(&rng, xhost, M * K, -1.0f, 1.0f);
    tu_rand_f32(&rng, w, K * N, -1.0f, 1.0f);
    const int64_t sx[] = {M, K}, sw[] = {K, N}, blk[] = {32};
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme qb = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    for (int d = 0; d < ndev; d++) {
        ember_tensor *wf = NULL;
        if (ember_tensor_from_data(ctx, devs[d], EMBER_F32, 2, sx, xhost, &X[d]) ||
            ember_tensor_from_data(ctx, devs[d], EMBER_F32, 2, sw, w, &wf) ||
            ember_quantize(wf, &q8, &W[d]) || ember_quantize(X[d], &q8, &XQ[d]) ||
            ember_quantize(wf, &qb, &WB[d]))
            return 1;
        ember_tensor_free(wf);
    }
    /* references on the CPU (the other device must agree: test_opencl checks that too) */
    ember_tensor *y = NULL;
    if (ember_q_matmul(XQ[0], W[0], &y) || !read_f32(y, ref_qq, M * N))
        return 1;
    ember_tensor_free(y);
    if (ember_q_matmul(X[0], W[0], &y) || !read_f32(y, ref_fq, M * N))
        return 1;
    ember_tensor_free(y);
    if (ember_q_matmul(X[0], WB[0], &y) || !read_f32(y, ref_fb, M * N))
        return 1;
    ember_tensor_free(y);
    if (ember_qtensor_to_bytes(W[0], NULL, 0, &ref_wlen))
        return 1;
    ref_wbytes = malloc(ref_wlen);
    return ember_qtensor_to_bytes(W[0], ref_wbytes, ref_wlen, &ref_wlen) != EMBER_OK;
}

static int suite_clean(void) {
    for (int d = 0; d < ndev; d++) {
        ember_tensor_free(X[d]);
        ember_tensor_free(W[d]);
        ember_tensor_free(XQ[d]);
        ember_tensor_free(WB[d]);
    }
    free(ref_wbytes);
    ember_context_destroy(ctx);
    return 0;
}

typedef struct worker {
    pthread_t th;
    int id;
    int warm; /* run every case once on every device, single-threaded, then stop */
    long calls, bad;
    char why[160];
} worker;

#define BAD(w, ...)                                                                                \
    do {                                                                                           \
        if (!(w)->bad++)                                                                           \
            snprintf((w)->why, sizeof(w)->why, __VA_ARGS__);                                       \
    } while (0)

static void *run(void *arg) {
    worker *w = arg;
    uint64_t rng = (uint64_t)0x9E37 * (uint64_t)(w->id + 1);
    float y[M * N];
    const double end = now() + seconds;
    for (long it = 0; w->warm ? it < 8L * ndev : now() < end; it++) {
        int d = w->warm ? (int)(it / 8) : (int)(tu_next(&rng) % (uint64_t)ndev);
        int what = w->warm ? (int)(it % 8) : (int)(tu_next(&rng) % 8);
        ember_tensor *t = NULL, *u = NULL;
        switch (what) {
        case 0: /* (Q,Q) integer arm on shared operands: exact */
            if (ember_q_matmul(XQ[d], W[d], &t) || !read_f32(t, y, M * N))
                BAD(w, "q_matmul (Q,Q): %s", ember_last_error());
            else if (d == 0 ? memcmp(y, ref_qq, sizeof y) != 0 : !close_to(y, ref_qq, M * N))
                BAD(w, "q_matmul (Q,Q) on device %d differs from the reference", d);
            break;
        case 1: /* (F,Q) and per-block weights (their pack caches fill concurrently) */
            if (ember_q_matmul(X[d], (tu_next(&rng) & 1) ? W[d] : WB[d], &t) ||
                !read_f32(t, y, M * N))
                BAD(w, "q_matmul (F,Q): %s", ember_last_error());
            else if (!close_to(y, ref_fq, M * N) && !close_to(y, ref_fb, M * N))
                BAD(w, "q_matmul (F,Q) on device %d differs from the reference", d);
            break;
        case 2: { /* quantize a fresh copy: the same bytes as the reference's activations */
            const int64_t sx[] = {M, K};
            ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
            unsigned char a[M * K + 64], b[M * K + 64];
            size_t la = 0, lb = 0;
            if (ember_tensor_from_data(ctx, devs[d], EMBER_F32, 2, sx, xhost, &t) ||
                ember_quantize(t, &q8, &u) || ember_qtensor_to_bytes(u, a, sizeof a, &la) ||
                ember_qtensor_to_bytes(XQ[0], b, sizeof b, &lb))
                BAD(w, "quantize: %s", ember_last_error());
            else if (la != lb || memcmp(a, b, la) != 0)
                BAD(w, "quantize on device %d: bytes differ", d);
            break;
        }
        case 3: { /* to_device round trip of a shared tensor */
            float back[M * K];
            ember_device other = devs[(d + 1) % ndev];
            if (ember_to_device(X[d], other, &t) || ember_to_device(t, devs[d], &u) ||
                !read_f32(u, back, M * K))
                BAD(w, "to_device: %s", ember_last_error());
            else if (memcmp(back, xhost, sizeof back) != 0)
                BAD(w, "to_device round trip changed the data");
            break;
        }
        case 4: { /* dequantize a shared weight; its bytes must not change */
            unsigned char b[K * N + 64];
            size_t lb = 0;
            if (ember_dequantize(W[d], &t) || ember_qtensor_to_bytes(W[d], b, sizeof b, &lb))
                BAD(w, "dequantize: %s", ember_last_error());
            else if (lb != ref_wlen || memcmp(b, ref_wbytes, lb) != 0)
                BAD(w, "a shared quantized weight changed");
            break;
        }
        case 5: { /* a guard failure: the detail is this thread's own */
            ember_tensor *bad = NULL;
            ember_status st =
                ember_tensor_from_data(ctx, devs[d], EMBER_F32, w->id + 100, NULL, NULL, &bad);
            if (st != EMBER_ERR_INVALID_ARGUMENT || bad)
                BAD(w, "rank guard: %s", ember_status_name(st));
            char expect[32];
            snprintf(expect, sizeof expect, "rank %d", w->id + 100);
            if (!strstr(ember_last_error(), expect))
                BAD(w, "thread %d sees another thread's error: %s", w->id, ember_last_error());
            if (ndev > 1 && ember_q_matmul(XQ[0], W[1], &t) != EMBER_ERR_BACKEND_MISMATCH)
                BAD(w, "backend guard");
            break;
        }
        case 6: { /* a context of this thread's own, made and destroyed while others work */
            ember_options o = ember_options_default();
            o.enable_opencl = 0;
            o.num_threads = 1;
            ember_context *c = NULL;
            const int64_t s[] = {2};
            const float v[2] = {1, 2};
            ember_tensor *z = NULL;
            if (ember_context_create(&o, &c) ||
                ember_tensor_from_data(c, TU_CPU, EMBER_F32, 1, s, v, &z))
                BAD(w, "private context: %s", ember_last_error());
            ember_tensor_free(z);
            ember_context_destroy(c);
            break;
        }
        default: { /* create and free many small tensors on either device */
            const int64_t s[] = {4};
            const float v[4] = {1, 2, 3, 4};
            for (int i = 0; i < 4; i++) {
                ember_tensor *z = NULL;
                if (ember_tensor_from_data(ctx, devs[d], EMBER_F32, 1, s, v, &z))
                    BAD(w, "from_data: %s", ember_last_error());
                ember_tensor_free(z);
            }
            break;
        }
        }
        ember_tensor_free(t);
        ember_tensor_free(u);
        w->calls++;
    }
    return NULL;
}

static void test_threads(void) {
    /* first every path once, alone: programs and pre-packed weights are cached for the life of
     * the context / the shared tensors, and the live-block count must be stable after that */
    worker warm;
    memset(&warm, 0, sizeof warm);
    warm.warm = 1;
    run(&warm);
    CU_ASSERT_EQUAL_FATAL(warm.bad, 0);
    TU_OK(ember_context_trim(ctx)); /* the count below is taken with no buffer kept for reuse */
    long live = ember__alloc_live();
    worker ws[NTHREADS];
    double t0 = now();
    for (int i = 0; i < NTHREADS; i++) {
        memset(&ws[i], 0, sizeof ws[i]);
        ws[i].id = i;
        CU_ASSERT_FATAL(pthread_create(&ws[i].th, NULL, run, &ws[i]) == 0);
    }
    long calls = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(ws[i].th, NULL);
        calls += ws[i].calls;
        if (ws[i].bad)
            fprintf(stderr, "thread %d: %ld failure(s), first: %s\n", i, ws[i].bad, ws[i].why);
        CU_ASSERT_EQUAL(ws[i].bad, 0);
    }
    double el = now() - t0;
    printf("\n%d threads x %.1f s = %.1f thread-seconds, %ld calls, devices: %s\n", NTHREADS, el,
           NTHREADS * el, calls, ndev > 1 ? "cpu:0 + opencl:0" : "cpu:0");
    CU_ASSERT(calls > 0);
    TU_OK(ember_context_trim(ctx)); /* buffers kept for reuse are no leak: give them back */
    CU_ASSERT_EQUAL(ember__alloc_live(), live);
}

int main(void) {
    /* level 1 logs nothing to stderr, but every context creation stores the level while other
     * threads read it when recording a failure: under TSan, that store must be race-free */
    setenv("EMBER_LOG", "error", 0);
    CU_TestInfo tests[] = {
        {"8 threads share a context", test_threads},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"threads", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_threads", suites);
}
