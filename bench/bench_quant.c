/* bench/bench_quant.c: quantize / dequantize bandwidth on the CPU backend next to a plain memcpy
 * of the same 64 MiB, measured in the same run, interleaved (memcpy, op, memcpy, op, ...),
 * medians over the repetitions.
 *
 * Columns: f32 GB/s = 64 MiB of F32 (the tensor) per second, for memcpy too (so a ratio is
 * t_memcpy / t_op); traffic GB/s = bytes read + bytes written per second. Two memcpy baselines:
 * "warm" copies into a destination touched before (the kernel rows' situation), "fresh" into a
 * destination allocated for that copy (64 MiB aligned_alloc + memcpy + free: the api rows'
 * situation, whose output pages are touched for the first time). Two rows per case:
 *   api    ember_quantize / ember_dequantize, which allocate their output each call;
 *   kernel the backend entry into an output allocated (and touched) once.
 * The warm copy is timed after an untimed one (see the loop). The ratio column is
 * t_memcpy(warm) / t_op for every row (conservative for api rows, which pay
 * the first touch of their output as the fresh memcpy does, but spread over the threads).
 * Schemes: per tensor; blocks of 32 along the rows ([32], burn's per_block([32])); blocks of 32
 * down the columns ([32, 1], a [k, n] weight's blocks along K, a scale per value of a row).
 * Usage: bench_quant [reps] [--scalar]  (default 15; --scalar forces the scalar kernel tier). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu_quant.h"
#include "dispatch/internal.h"

#define MIB ((size_t)1 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *(*volatile copy)(void *, const void *, size_t) = memcpy;
static volatile unsigned char sink;

typedef struct bcase {
    const char *name;
    ember_qscheme s;
} bcase;

int main(int argc, char **argv) {
    int reps = 15, scalar = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        long r = strtol(argv[i], &end, 10);
        if (strcmp(argv[i], "--scalar") == 0) {
            scalar = 1;
        } else if (*argv[i] && !*end && r >= 1) {
            reps = (int)(r < 200 ? r : 200);
        } else {
            fprintf(stderr, "usage: bench_quant [reps >= 1] [--scalar]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (reps > 200)
        reps = 200;
    ember__cpu_quant_force_scalar(scalar);
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *ctx = NULL;
    if (ember_context_create(&o, &ctx) != EMBER_OK) {
        fprintf(stderr, "context: %s\n", ember_last_error());
        return 1;
    }
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int64_t shape[2] = {4096, 4096}; /* 16 Mi floats = 64 MiB */
    const size_t n = (size_t)shape[0] * (size_t)shape[1], bytes = n * 4;
    float *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst)
        return 1;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        src[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 8.0 - 4.0);
    }
    memcpy(dst, src, bytes); /* touch */
    ember_tensor *x = NULL;
    if (ember_tensor_from_data(ctx, cpu, EMBER_F32, 2, shape, src, &x) != EMBER_OK) {
        fprintf(stderr, "from_data: %s\n", ember_last_error());
        return 1;
    }
    const int64_t b32[] = {32}, b32k[] = {32, 1}; /* blocks along rows, or down columns */
    enum { NCASES = 5 };
    bcase cases[NCASES] = {
        {"Q8S per-tensor", ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE)},
        {"Q8S block 32", ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b32)},
        {"Q4S u32 block 32", ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, b32)},
        {"Q8S block [32,1]", ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, b32k)},
        {"Q4S u32 [32,1]", ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, b32k)},
    };
    const ember_backend_ops *ops = ctx->be[EMBER_BACKEND_CPU].ops;
    void *state = ctx->be[EMBER_BACKEND_CPU].state;
    printf("bench_quant: 64 MiB F32 [4096, 4096], %d threads, kernel tier %s, %d reps, medians\n",
           ember__cpu_state_of(ctx)->num_threads,
           ember__cpu_qkern_select(ember__cpu_state_of(ctx))->name, reps);
    printf("%-18s %-10s %-6s %8s %8s %8s | %8s %8s | %8s %8s | %6s\n", "scheme", "op", "path",
           "op ms", "f32 GB/s", "trafGB/s", "warm ms", "GB/s", "fresh ms", "GB/s", "ratio");
    double *t_op = malloc((size_t)reps * sizeof *t_op), *t_mc = malloc((size_t)reps * sizeof *t_mc);
    double *t_mf = malloc((size_t)reps * sizeof *t_mf);
    for (int c = 0; c < NCASES; c++) {
        ember_tensor *qk = NULL, *fk = NULL;
        size_t nb;
        if (ember__qtensor_alloc(ctx, cpu, &cases[c].s, 2, shape, &qk) != EMBER_OK ||
            ember__shape_bytes(EMBER_F32, 2, shape, NULL, &nb) != EMBER_OK ||
            ember__tensor_alloc(ctx, cpu, EMBER_F32, 2, shape, nb, &fk) != EMBER_OK) {
            fprintf(stderr, "alloc: %s\n", ember_last_error());
            return 1;
        }
        memset(qk->buf, 0, qk->q.total_bytes);
        memset(fk->buf, 0, nb);
        const size_t qbytes = qk->q.total_bytes;
        for (int op = 0; op < 2; op++)
            for (int path = 0; path < 2; path++) {
                for (int i = 0; i < reps; i++) {
                    double tf0 = now_s();
                    void *fresh = aligned_alloc(64, bytes);
                    if (!fresh)
                        return 1;
                    copy(fresh, src, bytes); /* through a volatile pointer: not elided */
                    sink = ((volatile unsigned char *)fresh)[bytes - 1];
                    free(fresh);
                    t_mf[i] = now_s() - tf0;
                    /* an untimed copy first: on the Zen 5 VM the first pass over memory after a
                     * 64 MiB munmap cost about as much as faulting it in (a warm 64 MiB memcpy
                     * 160-200 ms right after the fresh copy's free, 4-6 ms the next time), and the
                     * warm baseline read 26-74 ms in some rows */
                    copy(dst, src, bytes);
                    double t0 = now_s();
                    memcpy(dst, src, bytes);
                    double t1 = now_s();
                    ember_status st = EMBER_OK;
                    ember_tensor *out = NULL;
                    if (op == 0 && path == 0)
                        st = ember_quantize(x, &cases[c].s, &out);
                    else if (op == 0)
                        st = ops->quantize(state, 0, x, NULL, qk);
                    else if (path == 0)
                        st = ember_dequantize(qk, &out);
                    else
                        st = ops->dequantize(state, 0, qk, fk);
                    double t2 = now_s();
                    if (st != EMBER_OK) {
                        fprintf(stderr, "%s: %s\n", cases[c].name, ember_last_error());
                        return 1;
                    }
                    ember_tensor_free(out);
                    t_mc[i] = t1 - t0;
                    t_op[i] = t2 - t1;
                }
                double mo = median(t_op, reps), mm = median(t_mc, reps), mf = median(t_mf, reps);
                double traffic = (double)(bytes + qbytes);
                printf("%-18s %-10s %-6s %8.2f %8.2f %8.2f | %8.2f %8.2f | %8.2f %8.2f | %5.0f%%\n",
                       cases[c].name, op ? "dequantize" : "quantize", path ? "kernel" : "api",
                       mo * 1e3, (double)bytes / mo * 1e-9, traffic / mo * 1e-9, mm * 1e3,
                       (double)bytes / mm * 1e-9, mf * 1e3, (double)bytes / mf * 1e-9,
                       100.0 * mm / mo);
            }
        ember__tensor_destroy(qk);
        ember__tensor_destroy(fk);
    }
    free(t_op);
    free(t_mc);
    free(t_mf);
    ember_tensor_free(x);
    ember_context_destroy(ctx);
    free(src);
    free(dst);
    return 0;
}
