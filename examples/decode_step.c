/* examples/decode_step.c: the number an LLM engine author asks first. One transformer-MLP decode
 * step at LLaMA-7B size, x[1 x 4096] -> W_up [4096 x 11008] -> ReLU -> W_down [11008 x 4096], with
 * random (seeded) weights, timed on every device and weight format: tokens/s for that block (one
 * token = one step) and the weight bytes it streams per second.
 *
 * Modes: "F x Q" is burn's semantics (float activations times quantized weights: the result of
 * dequantize-then-matmul); "W8A8" quantizes each matmul's activation row to Q8S on the fly
 * (ember_quantize, per-tensor) so that q_matmul runs Q x Q, on the integer kernels where the
 * device has them; "dynA8" runs F x Q in a context with ember_options.dynamic_activation_quant
 * (the backend quantizes the activation rows itself, where it implements the option). The last
 * column is the step's error against an F32 step on the CPU:
 * max |y - y_f32| / max |y_f32|.
 *
 * usage: decode_step [--reps N] [--quick] [--cpu-only]
 *   --quick     3 timed rounds instead of 15 (the medians are printed either way)
 *   --cpu-only  skip the OpenCL devices */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ember/ember.h>

#include "blas_coretype.h" /* ember's own tools: OpenBLAS on the right core (README.md) */
#include "example_util.h"

enum { D_MODEL = 4096, D_FF = 11008, MAX_REPS = 101 };

static uint64_t rng_state = 0xdec0de5eedull;
static void fill_uniform(float *p, size_t n, double lim) {
    uint64_t x = rng_state;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        double u = (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
        p[i] = (float)((2.0 * u - 1.0) * lim);
    }
    rng_state = x;
}

/* y = x @ w, with x quantized first (Q8S per-tensor: for one row the same numbers as per-row,
 * and the operand form every integer q_matmul path takes) when act_quant is set. */
static ember_tensor *matmul(const ember_tensor *x, const ember_tensor *w, int act_quant) {
    ember_tensor *y, *xq = NULL;
    if (act_quant) {
        const ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        CHECK(ember_quantize(x, &q8, &xq));
    }
    CHECK(ember_linear(xq ? xq : x, w, NULL, &y));
    ember_tensor_free(xq);
    return y;
}

/* One step; y (D_MODEL floats) is read back, which also waits for the device. */
static void step(const ember_tensor *x, const ember_tensor *w_up, const ember_tensor *w_down,
                 int act_quant, float *y) {
    ember_tensor *h = matmul(x, w_up, act_quant), *a, *out;
    CHECK(ember_relu(h, &a));
    out = matmul(a, w_down, act_quant);
    CHECK(ember_tensor_read(out, y, sizeof(float) * D_MODEL));
    ember_tensor_free(out);
    ember_tensor_free(a);
    ember_tensor_free(h);
}

static double rel_err(const float *y, const float *ref) {
    double m = 0.0, e = 0.0;
    for (int i = 0; i < D_MODEL; i++) {
        m = fmax(m, fabs((double)ref[i]));
        e = fmax(e, fabs((double)y[i] - (double)ref[i]));
    }
    return m > 0.0 ? e / m : e;
}

typedef struct fmt {
    const char *name;
    int quantized;
    ember_qscheme s;
} fmt;

int main(int argc, char **argv) {
    int reps = 15, cpu_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            reps = 3;
        else if (!strcmp(argv[i], "--cpu-only"))
            cpu_only = 1;
        else {
            fprintf(stderr, "usage: %s [--reps N] [--quick] [--cpu-only]\n", argv[0]);
            return 1;
        }
    }
    if (reps < 1 || reps > MAX_REPS)
        reps = 15;

    const int64_t blk[2] = {32, 1}; /* blocks of 32 along K (d_in) */
    const fmt fmts[] = {
        {"F32", 0, {0}},
        {"Q8S per-tensor", 1, ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE)},
        {"Q8S block 32", 1, ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk)},
        {"Q4S block 32 u32", 1,
         ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, blk)},
    };
    const int n_fmts = (int)(sizeof fmts / sizeof fmts[0]);

    ember_context *ctx;
    CHECK(ember_context_create(NULL, &ctx));
    ember_device_info cpu_info;
    CHECK(ember_device_describe(ctx, (ember_device){EMBER_BACKEND_CPU, 0}, &cpu_info));
    ember_tool_blas_coretype(argv, cpu_info.blas_core); /* may re-run this program once */

    /* the weights, scaled as at initialisation so that activations stay O(1) */
    const size_t n_up = (size_t)D_MODEL * D_FF;
    float *w_up = xmalloc(n_up * sizeof(float)), *w_down = xmalloc(n_up * sizeof(float));
    float x[D_MODEL], y[D_MODEL], y_ref[D_MODEL];
    fill_uniform(x, D_MODEL, 1.0);
    fill_uniform(w_up, n_up, sqrt(3.0 / D_MODEL));
    fill_uniform(w_down, n_up, sqrt(3.0 / D_FF));
    const int64_t xs[2] = {1, D_MODEL}, us[2] = {D_MODEL, D_FF}, ds[2] = {D_FF, D_MODEL};

    /* mode 2 runs F x Q in a second context made with ember_options.dynamic_activation_quant:
     * a backend that honours it quantizes the activation rows itself (per row) and keeps the
     * weights pre-packed; one that does not runs burn's F x Q path, as mode 0 */
    const char *mode_name[3] = {"F x Q", "W8A8", "dynA8"};
    ember_context *ctx_dyn;
    ember_options o = ember_options_default();
    o.dynamic_activation_quant = 1;
    CHECK(ember_context_create(&o, &ctx_dyn));
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int n_cl = cpu_only ? 0 : ember_device_count(ctx, EMBER_BACKEND_OPENCL);

    printf("decode step: x[1x%d] @ W_up[%dx%d] -> ReLU -> @ W_down[%dx%d]; median of %d rounds\n\n",
           D_MODEL, D_MODEL, D_FF, D_FF, D_MODEL, reps);
    printf("%-17s %-6s %-44s %11s %10s %9s %9s %10s\n", "weights", "mode", "device", "weight MB",
           "ms/step", "tokens/s", "GB/s", "rel err");
    int have_ref = 0;
    for (int d = -1; d < n_cl; d++) {
        const ember_device dev = d < 0 ? cpu : (ember_device){EMBER_BACKEND_OPENCL, d};
        ember_device_info info;
        CHECK(ember_device_describe(ctx, dev, &info));
        char devname[128];
        snprintf(devname, sizeof devname, "%s:%d %.60s", ember_backend_name(dev.backend), dev.index,
                 info.name);
        for (int ci = 0; ci < 2; ci++) {
            ember_context *c = ci ? ctx_dyn : ctx;
            ember_tensor *tx, *tu, *td;
            CHECK(ember_tensor_from_data(c, dev, EMBER_F32, 2, xs, x, &tx));
            CHECK(ember_tensor_from_data(c, dev, EMBER_F32, 2, us, w_up, &tu));
            CHECK(ember_tensor_from_data(c, dev, EMBER_F32, 2, ds, w_down, &td));
            for (int f = ci; f < n_fmts; f++) { /* F32 weights: F x F, once */
                ember_tensor *qu = tu, *qd = td;
                size_t bytes = 2 * n_up * sizeof(float);
                if (fmts[f].quantized) { /* quantized on the device itself */
                    size_t lu, ld;
                    CHECK(ember_quantize(tu, &fmts[f].s, &qu));
                    CHECK(ember_quantize(td, &fmts[f].s, &qd));
                    CHECK(ember_qtensor_to_bytes(qu, NULL, 0, &lu));
                    CHECK(ember_qtensor_to_bytes(qd, NULL, 0, &ld));
                    bytes = lu + ld;
                }
                /* ctx: F x Q and W8A8 (F32 weights: F x F only); ctx_dyn: dynA8 */
                const int first = ci ? 2 : 0, last = ci ? 2 : fmts[f].quantized ? 1 : 0;
                for (int mode = first; mode <= last; mode++) {
                    double t[MAX_REPS];
                    step(tx, qu, qd, mode == 1, y); /* warm-up: kernels built, weights packed */
                    if (!have_ref) { /* the first row is F32 on the CPU: the reference */
                        memcpy(y_ref, y, sizeof y);
                        have_ref = 1;
                    }
                    for (int r = 0; r < reps; r++) {
                        double t0 = now_s();
                        step(tx, qu, qd, mode == 1, y);
                        t[r] = now_s() - t0;
                    }
                    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
                    const double med = t[reps / 2];
                    printf("%-17s %-6s %-44.44s %11.1f %10.3f %9.1f %9.1f %10.2e\n", fmts[f].name,
                           fmts[f].quantized ? mode_name[mode] : "F x F", devname,
                           (double)bytes / 1e6, 1e3 * med, 1.0 / med, (double)bytes / med / 1e9,
                           rel_err(y, y_ref));
                    fflush(stdout);
                }
                if (fmts[f].quantized) {
                    ember_tensor_free(qu);
                    ember_tensor_free(qd);
                }
            }
            ember_tensor_free(tx);
            ember_tensor_free(tu);
            ember_tensor_free(td);
        }
    }
    printf("\n(tokens/s counts this one MLP block per token; GB/s is the weight bytes per step "
           "divided by the step time)\n");
    ember_context_destroy(ctx_dyn);
    ember_context_destroy(ctx);
    free(w_up);
    free(w_down);
    return 0;
}
