/* bench/bench_matmul.c: matmul throughput, ember against the libraries it is measured by.
 *
 * For each shape every available "provider" (one kernel path) runs once to warm up, then all of
 * them run in turn, round after round, each round in a shuffled order (interleaved, so that a
 * noisy neighbour or a clock change hits them alike, and no row always follows the same one), and
 * each row reports the median and minimum of its rounds, GOPS (2mnk per call), and the largest
 * error on sampled outputs against a float64 product of the same f32 inputs. The first provider of
 * the table, the direct cblas_sgemm call, is the reference: the table's vs_ref column is each row's
 * GOPS over it.
 *
 * Adding rows (int8 CPU kernels, oneDNN, OpenCL devices): write a provider (setup / run / result
 * / teardown below) and list it in `providers[]`. setup() returns 0 to skip where the path is not
 * available (no device, no oneDNN); a quantized provider quantizes the f32 inputs in setup(),
 * untimed, and its max_abs_err then includes the quantization error.
 *
 * Usage: bench_matmul [--csv | --json] [--reps N] [--shape MxNxK]... [--only SUBSTRING]
 * Defaults are sized for a 2-core machine: the whole run takes seconds. */
#include <cblas.h>
#include <errno.h>

#include "bench_common.h"

/* ---- the problem every provider of a shape gets ---- */
typedef struct problem {
    ember_context *ctx;
    int64_t m, n, k;
    const float *a, *b; /* row-major [m, k] and [k, n] */
} problem;

typedef struct provider {
    const char *name; /* matched by --only */
    /* Prepare (untimed): fill row's backend / device / kernel / dtype, set *state. Returns 1 when
     * ready, 0 to skip this provider here, -1 on an error (printed). */
    int (*setup)(const problem *p, void **state, bench_row *row);
    int (*run)(void *state);                /* one timed call: 0 on success */
    int (*result)(void *state, float *dst); /* the last output, [m, n] f32 (untimed) */
    void (*after)(void *state);             /* (optional) untimed clean-up after each run */
    void (*teardown)(void *state);
} provider;

/* ---- F32: cblas_sgemm called directly (the reference) ---- */
typedef struct blas_state {
    const problem *p;
    float *c;
} blas_state;

static int blas_setup(const problem *p, void **state, bench_row *row) {
    blas_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->p = p;
    s->c = malloc((size_t)(p->m * p->n) * sizeof(float));
    if (!s->c) {
        free(s);
        return -1;
    }
    snprintf(row->backend, sizeof row->backend, "openblas");
    snprintf(row->device, sizeof row->device, "host");
    snprintf(row->kernel, sizeof row->kernel, "cblas_sgemm");
    snprintf(row->dtype, sizeof row->dtype, "F32");
    *state = s;
    return 1;
}

static int blas_run(void *state) {
    blas_state *s = state;
    const problem *p = s->p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->m, (int)p->n, (int)p->k, 1.0f,
                p->a, (int)p->k, p->b, (int)p->n, 0.0f, s->c, (int)p->n);
    return 0;
}

static int blas_result(void *state, float *dst) {
    blas_state *s = state;
    memcpy(dst, s->c, (size_t)(s->p->m * s->p->n) * sizeof(float));
    return 0;
}

static void blas_teardown(void *state) {
    blas_state *s = state;
    free(s->c);
    free(s);
}

/* ---- F32: ember_matmul on the CPU backend ---- */
typedef struct ember_state {
    ember_tensor *a, *b, *c;
} ember_state;

static int ember_f32_setup(const problem *p, void **state, bench_row *row) {
    ember_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int64_t sa[] = {p->m, p->k}, sb[] = {p->k, p->n};
    if (ember_tensor_from_data(p->ctx, cpu, EMBER_F32, 2, sa, p->a, &s->a) != EMBER_OK ||
        ember_tensor_from_data(p->ctx, cpu, EMBER_F32, 2, sb, p->b, &s->b) != EMBER_OK) {
        fprintf(stderr, "ember f32: %s\n", ember_last_error());
        ember_tensor_free(s->a);
        free(s);
        return -1;
    }
    snprintf(row->backend, sizeof row->backend, "cpu");
    snprintf(row->device, sizeof row->device, "cpu:0");
    snprintf(row->kernel, sizeof row->kernel, "cpu.openblas_sgemm");
    snprintf(row->dtype, sizeof row->dtype, "F32");
    *state = s;
    return 1;
}

static void ember_f32_after(void *state) {
    ember_state *s = state;
    ember_tensor_free(s->c); /* the output is allocated by each call: that is timed, its free not */
    s->c = NULL;
}

static int ember_f32_run(void *state) {
    ember_state *s = state;
    ember_f32_after(s);
    if (ember_matmul(s->a, s->b, &s->c) != EMBER_OK) {
        fprintf(stderr, "ember_matmul: %s\n", ember_last_error());
        return -1;
    }
    return 0;
}

static int ember_f32_result(void *state, float *dst) {
    ember_state *s = state;
    int64_t n = ember_tensor_numel(s->c);
    return ember_tensor_read(s->c, dst, (size_t)n * sizeof(float)) == EMBER_OK ? 0 : -1;
}

static void ember_f32_teardown(void *state) {
    ember_state *s = state;
    ember_tensor_free(s->a);
    ember_tensor_free(s->b);
    ember_tensor_free(s->c);
    free(s);
}

/* ---- int8: ember's q_matmul on the CPU (issue 5) and oneDNN's s8 matmul ----
 * The operands are the same f32 inputs quantized in setup (untimed), so max_abs_err includes the
 * quantization error. ember rows go through the public API (ember_q_matmul: dispatcher, vtable
 * entry, kernels, the output tensor allocated per call):
 *   int8.q8s          Q8S x Q8S per-tensor, B packed once (the pack cache filled by the warm-up)
 *   int8.q8s_first    the same with B's pack cache dropped after every call: each call packs B
 *   int8.q4s_b32      Q8S activations x Q4S weights (PackedU32, blocks of 32 along K, F16 scales)
 *   onednn.s8_reorder oneDNN s8 x s8 -> s32 with B reordered once (then scaled, untimed)
 *   onednn.s8_plain   the same on plain row-major B
 * and burn's q_matmul with a float lhs (F x Q: the float operand stays float, the result is that
 * of dequantize-then-matmul; the only quantization error is the weights'):
 *   fq.q8s            F32 x Q8S weights (per tensor) through ember_q_matmul: the fused float
 *                     path (backends/cpu/fq_matmul.c; up to 256 rows on AVX2 and 64 without
 *                     it, beyond them dequantize + sgemm)
 *   fq.q8s_dequant    the same by hand, as burn's default does it: ember_dequantize of the weights
 *                     then ember_matmul, every call
 *   fq.q4s_n32        F32 x Q4S weights with burn's per_block([32]) on their [k, n] layout (an F16
 *                     scale per 32 columns of each K row), through ember_q_matmul
 *   fq.q4s_n32_dequant the same by hand (dequantize, then ember_matmul) */
#include "backends/cpu/fq_matmul.h"
#include "bench_dnnl.h"
#include "dispatch/internal.h"

/* the ways a q_state row runs: Q x Q (the pack cache kept or dropped after every call), F x Q
 * through ember_q_matmul, F x Q by hand (dequantize the weights, then ember_matmul) */
enum { Q_QQ, Q_QQ_FIRST, Q_FQ, Q_FQ_DEQUANT };

typedef struct q_state {
    ember_tensor *qa, *qb, *c; /* qa stays F32 for the F x Q rows */
    ember_tensor *dw;          /* Q_FQ_DEQUANT: this call's dequantized weights */
    int mode;
} q_state;

static int q_setup_scheme(const problem *p, void **state, bench_row *row, const ember_qscheme *sb,
                          int mode, const char *what, const char *dtype) {
    q_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int64_t sa[] = {p->m, p->k}, sbs[] = {p->k, p->n};
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    const int float_lhs = mode == Q_FQ || mode == Q_FQ_DEQUANT;
    ember_tensor *x = NULL, *w = NULL;
    int ok = ember_tensor_from_data(p->ctx, cpu, EMBER_F32, 2, sa, p->a, &x) == EMBER_OK &&
             ember_tensor_from_data(p->ctx, cpu, EMBER_F32, 2, sbs, p->b, &w) == EMBER_OK &&
             (float_lhs || ember_quantize(x, &q8, &s->qa) == EMBER_OK) &&
             ember_quantize(w, sb, &s->qb) == EMBER_OK;
    if (float_lhs) {
        s->qa = x;
        x = NULL;
    }
    ember_tensor_free(x);
    ember_tensor_free(w);
    if (!ok) {
        fprintf(stderr, "ember int8 setup: %s\n", ember_last_error());
        ember_tensor_free(s->qa);
        ember_tensor_free(s->qb);
        free(s);
        return -1;
    }
    s->mode = mode;
    ember_device_info info;
    memset(&info, 0, sizeof info);
    ember_device_describe(p->ctx, cpu, &info);
    snprintf(row->backend, sizeof row->backend, "cpu");
    snprintf(row->device, sizeof row->device, "cpu:0");
    if (mode == Q_FQ) /* the fused path's row limit on this tier */
        snprintf(row->kernel, sizeof row->kernel, "%s %s", what,
                 p->m <= ember__cpu_fq_max_rows(ember__cpu_state_of(p->ctx)) ? "fused"
                                                                             : "dequant+sgemm");
    else
        snprintf(row->kernel, sizeof row->kernel, "%s%s", float_lhs ? "" : info.int8_matmul_path,
                 what);
    snprintf(row->dtype, sizeof row->dtype, "%s", dtype);
    *state = s;
    return 1;
}

static int q8_setup(const problem *p, void **state, bench_row *row) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    return q_setup_scheme(p, state, row, &s, Q_QQ, "", "Q8S");
}

static int q8_first_setup(const problem *p, void **state, bench_row *row) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    return q_setup_scheme(p, state, row, &s, Q_QQ_FIRST, " 1st", "Q8S");
}

static int q4_setup(const problem *p, void **state, bench_row *row) {
    if (p->k % 32 != 0 || p->n % 8 != 0)
        return 0;
    ember_qscheme s =
        ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, (const int64_t[]){32, 1});
    s.block_scale = EMBER_SCALE_F16;
    return q_setup_scheme(p, state, row, &s, Q_QQ, "", "Q4S/Q8S");
}

/* F x Q: the lhs stays F32, the weights are Q8S per tensor */
static int fq_setup(const problem *p, void **state, bench_row *row) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    return q_setup_scheme(p, state, row, &s, Q_FQ, "fq", "F32/Q8S");
}

static int fq_dequant_setup(const problem *p, void **state, bench_row *row) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    return q_setup_scheme(p, state, row, &s, Q_FQ_DEQUANT, "dequantize+sgemm", "F32/Q8S");
}

/* F x Q with burn's per_block([32]) on the [k, n] weight: Q4S, a scale (F16) per 32 columns of
 * each K row */
static ember_qscheme q4_n32(void) {
    ember_qscheme s =
        ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, (const int64_t[]){1, 32});
    s.block_scale = EMBER_SCALE_F16;
    return s;
}

static int fq_n32_setup(const problem *p, void **state, bench_row *row) {
    if (p->n % 32 != 0)
        return 0;
    ember_qscheme s = q4_n32();
    return q_setup_scheme(p, state, row, &s, Q_FQ, "fq", "F32/Q4Sn32");
}

static int fq_n32_dequant_setup(const problem *p, void **state, bench_row *row) {
    if (p->n % 32 != 0)
        return 0;
    ember_qscheme s = q4_n32();
    return q_setup_scheme(p, state, row, &s, Q_FQ_DEQUANT, "dequantize+sgemm", "F32/Q4Sn32");
}

static void q_after(void *state) {
    q_state *s = state;
    ember_tensor_free(s->c);
    ember_tensor_free(s->dw);
    s->c = s->dw = NULL;
    if (s->mode == Q_QQ_FIRST) { /* forget B's packed copy: the next call is a first call again */
        ember_tensor *b = s->qb;
        pthread_mutex_lock(&b->pack.lock);
        if (b->pack.data && b->pack.release)
            b->pack.release(NULL, b->pack.data);
        b->pack.data = NULL;
        b->pack.bytes = 0;
        b->pack.kind = 0;
        pthread_mutex_unlock(&b->pack.lock);
    }
}

static int q_run(void *state) {
    q_state *s = state;
    ember_tensor_free(s->c);
    ember_tensor_free(s->dw);
    s->c = s->dw = NULL;
    ember_status st = s->mode == Q_FQ_DEQUANT ? ember_dequantize(s->qb, &s->dw) : EMBER_OK;
    if (st == EMBER_OK)
        st = s->dw ? ember_matmul(s->qa, s->dw, &s->c) : ember_q_matmul(s->qa, s->qb, &s->c);
    if (st != EMBER_OK) {
        fprintf(stderr, "ember_q_matmul: %s\n", ember_last_error());
        return -1;
    }
    return 0;
}

static int q_result(void *state, float *dst) {
    q_state *s = state;
    int64_t n = ember_tensor_numel(s->c);
    return ember_tensor_read(s->c, dst, (size_t)n * sizeof(float)) == EMBER_OK ? 0 : -1;
}

static void q_teardown(void *state) {
    q_state *s = state;
    ember_tensor_free(s->qa);
    ember_tensor_free(s->qb);
    ember_tensor_free(s->c);
    ember_tensor_free(s->dw);
    free(s);
}

#ifdef EMBER_BENCH_HAVE_DNNL
typedef struct dnnl_state {
    bench_dnnl d;
    int8_t *a, *b;
    int32_t *c;
    float sa, sb;
    int64_t mn;
} dnnl_state;

static float quant_s8(const float *x, size_t n, int8_t *q) {
    float amax = 0;
    for (size_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float s = amax > 0 ? amax / 127.0f : 1.0f;
    for (size_t i = 0; i < n; i++)
        q[i] = (int8_t)lrintf(fminf(fmaxf(x[i] / s, -127.0f), 127.0f));
    return s;
}

static int dnnl_setup_common(const problem *p, void **state, bench_row *row, int reorder) {
    dnnl_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    size_t na = (size_t)(p->m * p->k), nb = (size_t)(p->k * p->n);
    s->mn = p->m * p->n;
    s->a = malloc(na);
    s->b = malloc(nb);
    s->c = malloc((size_t)s->mn * sizeof(int32_t));
    if (!s->a || !s->b || !s->c) {
        free(s->a), free(s->b), free(s->c), free(s);
        return -1;
    }
    s->sa = quant_s8(p->a, na, s->a);
    s->sb = quant_s8(p->b, nb, s->b);
    bench_dnnl_threads(openblas_get_num_threads());
    if (!bench_dnnl_setup(&s->d, p->m, p->n, p->k, s->a, s->b, s->c, reorder)) {
        bench_dnnl_free(&s->d);
        free(s->a), free(s->b), free(s->c), free(s);
        return 0;
    }
    snprintf(row->backend, sizeof row->backend, "onednn");
    snprintf(row->device, sizeof row->device, "host");
    snprintf(row->kernel, sizeof row->kernel, "%.30s%s", s->d.impl, reorder ? " reord" : " plain");
    snprintf(row->dtype, sizeof row->dtype, "S8->S32");
    *state = s;
    return 1;
}

static int dnnl_reorder_setup(const problem *p, void **state, bench_row *row) {
    return dnnl_setup_common(p, state, row, 1);
}

static int dnnl_plain_setup(const problem *p, void **state, bench_row *row) {
    return dnnl_setup_common(p, state, row, 0);
}

static int dnnl_run_one(void *state) { return bench_dnnl_run(&((dnnl_state *)state)->d); }

static int dnnl_result(void *state, float *dst) {
    dnnl_state *s = state;
    for (int64_t i = 0; i < s->mn; i++)
        dst[i] = (float)s->c[i] * s->sa * s->sb;
    return 0;
}

static void dnnl_teardown(void *state) {
    dnnl_state *s = state;
    bench_dnnl_free(&s->d);
    free(s->a), free(s->b), free(s->c), free(s);
}
#endif

/* ---- OpenCL: ember_matmul (F32) and ember_q_matmul (Q8S x Q8S per-tensor) on each device ----
 * One context with the OpenCL backend, opened on first use and kept to the end of the run; a
 * provider per (device index, dtype) for the first four devices (setup skips an index the machine
 * does not have). Each timed call ends with the device's queue drained (the backend's sync), so the
 * time is the kernel's and the output's allocation, not a download. The int8 rows quantize A and B
 * on the device in setup (untimed); their error includes the quantization error. A build without
 * the OpenCL backend has no OpenCL device: the rows are skipped. */
/* (dispatch/internal.h, included above, gives the backend's sync entry) */

static ember_context *cl_ctx;

static void cl_ctx_close(void) { ember_context_destroy(cl_ctx); }

static ember_context *cl_context(void) {
    if (!cl_ctx) {
        ember_options o = ember_options_default();
        o.enable_opencl = 1;
        if (ember_context_create(&o, &cl_ctx) != EMBER_OK) {
            fprintf(stderr, "opencl context: %s\n", ember_last_error());
            cl_ctx = NULL;
            return NULL;
        }
        atexit(cl_ctx_close);
    }
    return cl_ctx;
}

typedef struct cl_state {
    ember_device dev;
    int int8;
    ember_tensor *a, *b, *c;
} cl_state;

static int cl_setup(const problem *p, void **state, bench_row *row, int index, int int8) {
    ember_context *ctx = cl_context();
    if (!ctx || index >= ember_device_count(ctx, EMBER_BACKEND_OPENCL))
        return 0;
    cl_state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->dev = (ember_device){EMBER_BACKEND_OPENCL, index};
    s->int8 = int8;
    const int64_t sa[] = {p->m, p->k}, sb[] = {p->k, p->n};
    ember_tensor *fa = NULL, *fb = NULL;
    ember_status st = ember_tensor_from_data(ctx, s->dev, EMBER_F32, 2, sa, p->a, &fa);
    if (st == EMBER_OK)
        st = ember_tensor_from_data(ctx, s->dev, EMBER_F32, 2, sb, p->b, &fb);
    if (st == EMBER_OK && int8) {
        ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        st = ember_quantize(fa, &q8, &s->a);
        if (st == EMBER_OK)
            st = ember_quantize(fb, &q8, &s->b);
        ember_tensor_free(fa);
        ember_tensor_free(fb);
    } else {
        s->a = fa;
        s->b = fb;
    }
    ember_device_info info;
    if (st == EMBER_OK)
        st = ember_device_describe(ctx, s->dev, &info);
    if (st != EMBER_OK) {
        fprintf(stderr, "opencl:%d setup: %s\n", index, ember_last_error());
        ember_tensor_free(s->a);
        ember_tensor_free(s->b);
        free(s);
        return -1;
    }
    snprintf(row->backend, sizeof row->backend, "opencl");
    snprintf(row->device, sizeof row->device, "opencl:%d", index);
    snprintf(row->kernel, sizeof row->kernel, "%s",
             int8 ? info.int8_matmul_path : "opencl.gemm_f32");
    snprintf(row->dtype, sizeof row->dtype, "%s", int8 ? "Q8S" : "F32");
    *state = s;
    return 1;
}

static void cl_after(void *state) {
    cl_state *s = state;
    ember_tensor_free(s->c);
    s->c = NULL;
}

static int cl_run(void *state) {
    cl_state *s = state;
    cl_after(s);
    ember_status st = s->int8 ? ember_q_matmul(s->a, s->b, &s->c) : ember_matmul(s->a, s->b, &s->c);
    if (st == EMBER_OK) {
        const ember_backend_ops *ops = cl_ctx->be[EMBER_BACKEND_OPENCL].ops;
        st = ops->sync(cl_ctx->be[EMBER_BACKEND_OPENCL].state, s->dev.index);
    }
    if (st != EMBER_OK) {
        fprintf(stderr, "opencl:%d %s: %s\n", s->dev.index, s->int8 ? "q_matmul" : "matmul",
                ember_last_error());
        return -1;
    }
    return 0;
}

static int cl_result(void *state, float *dst) {
    cl_state *s = state;
    int64_t n = ember_tensor_numel(s->c);
    return ember_tensor_read(s->c, dst, (size_t)n * sizeof(float)) == EMBER_OK ? 0 : -1;
}

static void cl_teardown(void *state) {
    cl_state *s = state;
    ember_tensor_free(s->a);
    ember_tensor_free(s->b);
    ember_tensor_free(s->c);
    free(s);
}

#define CL_SETUP(i, q)                                                                             \
    static int cl_setup_##i##_##q(const problem *p, void **state, bench_row *row) {                \
        return cl_setup(p, state, row, i, q);                                                      \
    }
CL_SETUP(0, 0)
CL_SETUP(0, 1)
CL_SETUP(1, 0)
CL_SETUP(1, 1)
CL_SETUP(2, 0)
CL_SETUP(2, 1)
CL_SETUP(3, 0)
CL_SETUP(3, 1)
#define CL_ROWS(i)                                                                                 \
    {"opencl:" #i ".f32", cl_setup_##i##_0, cl_run, cl_result, cl_after, cl_teardown},             \
        {"opencl:" #i ".int8", cl_setup_##i##_1, cl_run, cl_result, cl_after, cl_teardown},

/* The reference first, then ember int8 and oneDNN on the CPU, then every OpenCL device. */
static const provider providers[] = {
    {"cblas_sgemm", blas_setup, blas_run, blas_result, NULL, blas_teardown},
    {"cpu.openblas_sgemm", ember_f32_setup, ember_f32_run, ember_f32_result, ember_f32_after,
     ember_f32_teardown},
    {"int8.q8s", q8_setup, q_run, q_result, q_after, q_teardown},
    {"int8.q8s_first", q8_first_setup, q_run, q_result, q_after, q_teardown},
    {"int8.q4s_b32", q4_setup, q_run, q_result, q_after, q_teardown},
    {"fq.q8s", fq_setup, q_run, q_result, q_after, q_teardown},
    {"fq.q8s_dequant", fq_dequant_setup, q_run, q_result, q_after, q_teardown},
    {"fq.q4s_n32", fq_n32_setup, q_run, q_result, q_after, q_teardown},
    {"fq.q4s_n32_dequant", fq_n32_dequant_setup, q_run, q_result, q_after, q_teardown},
#ifdef EMBER_BENCH_HAVE_DNNL
    {"onednn.s8_reorder", dnnl_reorder_setup, dnnl_run_one, dnnl_result, NULL, dnnl_teardown},
    {"onednn.s8_plain", dnnl_plain_setup, dnnl_run_one, dnnl_result, NULL, dnnl_teardown},
#endif
    CL_ROWS(0) CL_ROWS(1) CL_ROWS(2) CL_ROWS(3)};
#define NPROV ((int)(sizeof providers / sizeof providers[0]))

/* ---- accuracy: sampled outputs against a float64 product ---- */
#define NSAMPLES 256

typedef struct samples {
    int64_t i[NSAMPLES], j[NSAMPLES];
    double ref[NSAMPLES];
    int n;
} samples;

static void samples_make(const problem *p, samples *s) {
    uint64_t x = 0x2545f4914f6cdd1dull ^ (uint64_t)(p->m * 31 + p->n * 17 + p->k);
    s->n = p->m * p->n < NSAMPLES ? (int)(p->m * p->n) : NSAMPLES;
    for (int t = 0; t < s->n; t++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t cell = p->m * p->n <= NSAMPLES ? t : (int64_t)(x % (uint64_t)(p->m * p->n));
        s->i[t] = cell / p->n;
        s->j[t] = cell % p->n;
        double acc = 0;
        for (int64_t q = 0; q < p->k; q++)
            acc += (double)p->a[s->i[t] * p->k + q] * (double)p->b[q * p->n + s->j[t]];
        s->ref[t] = acc;
    }
}

static double samples_err(const problem *p, const samples *s, const float *c) {
    double e = 0;
    for (int t = 0; t < s->n; t++) {
        double d = fabs((double)c[s->i[t] * p->n + s->j[t]] - s->ref[t]);
        if (!(d <= e)) /* NaN counts as infinite */
            e = isnan(d) ? INFINITY : d;
    }
    return e;
}

/* ---- driver ---- */
typedef struct shape {
    int64_t m, n, k;
} shape;

static const shape default_shapes[] = {
    {1, 4096, 4096},  /* one token through a 4096x4096 layer: memory bound */
    {32, 4096, 4096}, /* a small batch of tokens */
    {256, 256, 256},    {1024, 1024, 1024},
    {2048, 2048, 2048}, /* 17 GFLOP a call; add --shape 4096x4096x4096 for the big one */
};

static int parse_shape(const char *s, shape *out) {
    long long m, n, k;
    char tail;
    if (sscanf(s, "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 || k < 1 ||
        m > (1 << 20) || n > (1 << 20) || k > (1 << 20))
        return -1;
    out->m = m;
    out->n = n;
    out->k = k;
    return 0;
}

/* 2 ms of idleness before each timed call, so that whatever the previous row left spinning or
 * draining (library threads, an OpenCL device's queue threads) is asleep by the time it starts. */
static void quiet_gap(void) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--csv | --json] [--reps N (>= 5)] [--shape MxNxK]... [--only SUBSTRING]\n",
            argv0);
}

int main(int argc, char **argv) {
    ember_tool_bench_env(argv, bench_blas_core()); /* spins and core type (blas_coretype.h) */

    bench_format fmt = BENCH_TABLE;
    int reps = 7;
    shape custom[32];
    int ncustom = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--csv") == 0) {
            fmt = BENCH_CSV;
        } else if (strcmp(argv[i], "--json") == 0) {
            fmt = BENCH_JSON;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            long r = strtol(argv[++i], &end, 10);
            if (*end || errno || r < 5 || r > 1000) {
                fprintf(stderr, "--reps wants a number in 5..1000 (medians of at least 5)\n");
                return 2;
            }
            reps = (int)r;
        } else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && ncustom < 32) {
            if (parse_shape(argv[++i], &custom[ncustom]) != 0) {
                fprintf(stderr, "bad shape \"%s\" (want MxNxK)\n", argv[i]);
                return 2;
            }
            ncustom++;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            usage(argv[0]);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    const shape *shapes = ncustom ? custom : default_shapes;
    const int nshapes = ncustom ? ncustom : (int)(sizeof default_shapes / sizeof default_shapes[0]);

    ember_options o = ember_options_default();
    o.enable_opencl = 0; /* OpenCL providers open their own context when they are added */
    ember_context *ctx = NULL;
    if (ember_context_create(&o, &ctx) != EMBER_OK) {
        fprintf(stderr, "ember_context_create: %s\n", ember_last_error());
        return 1;
    }

    bench_header(fmt, "bench_matmul");
    int first_row = 1, failed = 0;
    for (int si = 0; si < nshapes && !failed; si++) {
        const shape sh = shapes[si];
        size_t na = (size_t)(sh.m * sh.k), nb = (size_t)(sh.k * sh.n), nc = (size_t)(sh.m * sh.n);
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
        if (!a || !b || !c) {
            fprintf(stderr, "no memory for shape %lldx%lldx%lld\n", (long long)sh.m,
                    (long long)sh.n, (long long)sh.k);
            free(a);
            free(b);
            free(c);
            break;
        }
        bench_fill(a, na, 1000u + (uint64_t)si);
        bench_fill(b, nb, 2000u + (uint64_t)si);
        const problem p = {ctx, sh.m, sh.n, sh.k, a, b};
        samples smp;
        samples_make(&p, &smp);

        void *state[NPROV] = {0};
        int ready[NPROV] = {0};
        bench_row rows[NPROV];
        double *t[NPROV];
        memset(rows, 0, sizeof rows);
        for (int q = 0; q < NPROV; q++) {
            t[q] = calloc((size_t)reps, sizeof(double));
            if (only && q > 0 && !strstr(providers[q].name, only))
                continue; /* the reference always runs: vs_ref needs it */
            int r = providers[q].setup(&p, &state[q], &rows[q]);
            if (r < 0)
                failed = 1;
            ready[q] = r > 0 && t[q];
            /* warm up, and measure the error once (untimed) */
            if (ready[q] && (providers[q].run(state[q]) != 0 || providers[q].result(state[q], c))) {
                failed = 1;
                ready[q] = 0;
            }
            if (ready[q])
                rows[q].max_abs_err = samples_err(&p, &smp, c);
            if (ready[q] && providers[q].after)
                providers[q].after(state[q]);
        }
        /* each round in its own order (a shuffle from a fixed seed): a row meets what the row
         * before it left in the caches, and in a fixed order that is always the same row */
        uint64_t ox = 0x9e3779b97f4a7c15ull;
        for (int r = 0; r < reps && !failed; r++) {
            int order[NPROV];
            bench_shuffle(order, NPROV, &ox);
            for (int qi = 0; qi < NPROV; qi++) {
                const int q = order[qi];
                if (!ready[q])
                    continue;
                quiet_gap();
                double t0 = bench_now_ms();
                if (providers[q].run(state[q]) != 0)
                    failed = 1;
                t[q][r] = bench_now_ms() - t0;
                if (providers[q].after)
                    providers[q].after(state[q]);
            }
        }
        double ref_gops = 0;
        for (int q = 0; q < NPROV && !failed; q++) {
            if (!ready[q])
                continue;
            bench_row *row = &rows[q];
            row->m = sh.m;
            row->n = sh.n;
            row->k = sh.k;
            row->reps = reps;
            bench_stats(t[q], reps, &row->median_ms, &row->min_ms);
            row->gops = 2.0 * (double)sh.m * (double)sh.n * (double)sh.k / (row->median_ms * 1e6);
            if (q == 0)
                ref_gops = row->gops;
            row->vs_ref = ref_gops > 0 ? row->gops / ref_gops : 0;
            bench_print_row(fmt, row, first_row);
            first_row = 0;
        }
        for (int q = 0; q < NPROV; q++) {
            if (state[q])
                providers[q].teardown(state[q]);
            free(t[q]);
        }
        free(a);
        free(b);
        free(c);
    }
    bench_footer(fmt);
    ember_context_destroy(ctx);
    return failed ? 1 : 0;
}
