/* api_gpu.c: ember_q_matmul through the public API on the NVIDIA OpenCL device (issue 7, item 4:
 * the packed weights kept in the tensor's pack cache). Build on the GPU machine against a built
 * library (bench/gpu/final.sh does it):
 *   gcc -O2 -std=gnu11 -I include -o api_gpu bench/gpu/api_gpu.c BUILD/libember.a -lOpenCL -lm
 * -lpthread ... For M x 4096 x 4096 (Q8S per tensor): a warm-up product on another weight (builds
 * the programs), then the FIRST call with weight W (packs W into its cache, then the GEMM) and 10
 * later calls (GEMM only), each timed on the host up to the end of an ember_tensor_read of the
 * output, minus the time of that read alone (median of 5). Prints first and median later call in
 * microseconds, and the time per call of 20 calls queued back to back with one read at the end
 * (median of 5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/ember.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define OK(x)                                                                                      \
    do {                                                                                           \
        ember_status s_ = (x);                                                                     \
        if (s_ != EMBER_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #x, (int)s_,             \
                    ember_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static ember_tensor *qrand(ember_context *ctx, ember_device d, int64_t r, int64_t c,
                           unsigned seed) {
    float *x = malloc((size_t)(r * c) * 4);
    for (int64_t i = 0; i < r * c; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((int)(seed >> 8) % 2001 - 1000) / 1000.0f;
    }
    int64_t sh[2] = {r, c};
    ember_tensor *t = NULL, *q = NULL;
    OK(ember_tensor_from_data(ctx, d, EMBER_F32, 2, sh, x, &t));
    ember_qscheme qs = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    OK(ember_quantize(t, &qs, &q));
    ember_tensor_free(t);
    free(x);
    return q;
}

int main(void) {
    ember_context *ctx = NULL;
    OK(ember_context_create(NULL, &ctx));
    int nd = ember_device_count(ctx, EMBER_BACKEND_OPENCL), found = -1;
    ember_device_info info;
    for (int i = 0; i < nd && found < 0; i++) {
        ember_device d = {EMBER_BACKEND_OPENCL, i};
        if (ember_device_describe(ctx, d, &info) == EMBER_OK &&
            strstr(info.int8_matmul_path, "wgmma"))
            found = i;
    }
    if (found < 0) {
        printf("api_gpu: no wgmma OpenCL device\n");
        return 77;
    }
    ember_device gpu = {EMBER_BACKEND_OPENCL, found};
    printf("api_gpu: %s, int8 path %s\n", info.name, info.int8_matmul_path);
    const int64_t N = 4096, K = 4096;
    static const int64_t ms[] = {1, 128, 4096};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int64_t M = ms[mi];
        float *out = malloc((size_t)(M * N) * 4);
        ember_tensor *a = qrand(ctx, gpu, M, K, 7u), *w0 = qrand(ctx, gpu, K, N, 11u),
                     *w = qrand(ctx, gpu, K, N, 13u);
        ember_tensor *o = NULL;
        OK(ember_q_matmul(a, w0, &o)); /* warm-up: programs built, w0 packed */
        OK(ember_tensor_read(o, out, (size_t)(M * N) * 4));
        double rd[5];
        for (int r = 0; r < 5; r++) {
            double t0 = now_us();
            OK(ember_tensor_read(o, out, (size_t)(M * N) * 4));
            rd[r] = now_us() - t0;
        }
        qsort(rd, 5, sizeof rd[0], cmp_d);
        ember_tensor_free(o);
        double t0 = now_us();
        OK(ember_q_matmul(a, w, &o));
        OK(ember_tensor_read(o, out, (size_t)(M * N) * 4));
        double first = now_us() - t0 - rd[2];
        ember_tensor_free(o);
        double later[10];
        for (int r = 0; r < 10; r++) {
            t0 = now_us();
            OK(ember_q_matmul(a, w, &o));
            OK(ember_tensor_read(o, out, (size_t)(M * N) * 4));
            later[r] = now_us() - t0 - rd[2];
            ember_tensor_free(o);
        }
        qsort(later, 10, sizeof later[0], cmp_d);
        /* pipelined, as an engine queues a layer's ops: 20 calls back to back (each frees the
         * previous output), one read at the end; the median of 5 such runs, per call */
        double piped[5];
        for (int r = 0; r < 5; r++) {
            t0 = now_us();
            for (int c = 0; c < 20; c++) {
                ember_tensor_free(o);
                o = NULL;
                OK(ember_q_matmul(a, w, &o));
            }
            OK(ember_tensor_read(o, out, (size_t)(M * N) * 4));
            piped[r] = (now_us() - t0 - rd[2]) / 20.0;
        }
        ember_tensor_free(o);
        o = NULL;
        qsort(piped, 5, sizeof piped[0], cmp_d);
        printf("api_gpu %lldx%lldx%lld: first call (packs W) %.1f us, later calls (W cached) "
               "median %.1f us"
               " (output read %.1f us subtracted), pipelined %.1f us per call\n",
               (long long)M, (long long)N, (long long)K, first, later[5], rd[2], piped[2]);
        ember_tensor_free(a);
        ember_tensor_free(w0);
        ember_tensor_free(w);
        free(out);
    }
    ember_context_destroy(ctx);
    return 0;
}
