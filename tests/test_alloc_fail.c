/* tests/test_alloc_fail.c: allocation-failure injection over the public API, in the sqlite manner.
 *
 * Every allocation ember makes goes through dispatch/alloc.c. For each public call below, on the
 * CPU and on OpenCL device 0 (skipped when there is none), the walker fails the 1st, 2nd, 3rd, ...
 * allocation of the call until the call succeeds, and asserts on each failure:
 *   - the status is EMBER_ERR_OUT_OF_MEMORY, with a detail in ember_last_error();
 *   - every output pointer is NULL;
 *   - nothing leaked: ember's live-block count is back to where it was once the inputs are freed
 *     (LeakSanitizer checks the rest in the ASan build);
 *   - the inputs are untouched (their elements, or QuantizedBytes, compared with a snapshot);
 *   - the context still works (a small add on the same device gives the right numbers).
 * Inputs are made fresh for each attempt, so the allocations that fill per-tensor caches (packed
 * weights) are failed too; each call runs once before its walk so that per-context caches (OpenCL
 * programs) are warm and the live count is stable. The number of injected failures is printed
 * ("injected N allocation failures over M calls"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/internal.h"
#include "test_util.h"

static ember_context *ctx;
static ember_context *ctx_prop; /* quant_propagation = PROPAGATE */
static ember_context *ctx_dyn;  /* dynamic_activation_quant = 1 */
static long injected, walks;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.num_threads = 2;
    if (ember_context_create(&o, &ctx) != EMBER_OK)
        return 1;
    o.quant_propagation = EMBER_QUANT_PROPAGATE;
    if (ember_context_create(&o, &ctx_prop) != EMBER_OK)
        return 1;
    o.quant_propagation = EMBER_QUANT_INHIBIT;
    o.dynamic_activation_quant = 1;
    return ember_context_create(&o, &ctx_dyn) != EMBER_OK;
}

static int suite_clean(void) {
    ember_context_destroy(ctx_dyn);
    ember_context_destroy(ctx_prop);
    ember_context_destroy(ctx);
    printf("\ninjected %ld allocation failures over %ld walks\n", injected, walks);
    return 0;
}

/* ---- a case: inputs made by setup, the call under test, its outputs ---- */
#define NIN 3
typedef struct env {
    ember_context *ctx;
    ember_device dev;
    ember_tensor *in[NIN];
    ember_tensor *out;
    int param;
    unsigned char buf[4096]; /* host outputs (reads) */
    size_t len;
} env;

typedef ember_status (*setup_fn)(env *e);
typedef ember_status (*call_fn)(env *e);

static uint64_t rng = 0x5EEDull;

/* A fresh F32 tensor of random non-zero values. */
static ember_status f32(env *e, int slot, int rank, const int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *v = malloc(n * sizeof(float)); /* the test's own memory: not counted by ember */
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    tu_rand_f32(&rng, v, n, -2.0f, 2.0f);
    for (size_t i = 0; i < n; i++)
        if (v[i] == 0)
            v[i] = 0.5f;
    ember_status st =
        ember_tensor_from_data(e->ctx, e->dev, EMBER_F32, rank, shape, v, &e->in[slot]);
    free(v);
    return st;
}

static ember_status quant(env *e, int slot, int rank, const int64_t *shape,
                          const ember_qscheme *s) {
    ember_tensor *t = NULL;
    ember_status st = f32(e, slot, rank, shape);
    if (st != EMBER_OK)
        return st;
    t = e->in[slot];
    e->in[slot] = NULL;
    st = ember_quantize(t, s, &e->in[slot]);
    ember_tensor_free(t);
    return st;
}

typedef struct snapshot {
    unsigned char *bytes[NIN];
    size_t len[NIN];
} snapshot;

static void snap_take(const env *e, snapshot *s) {
    for (int i = 0; i < NIN; i++) {
        s->bytes[i] = NULL;
        s->len[i] = 0;
        const ember_tensor *t = e->in[i];
        if (!t)
            continue;
        if (ember_tensor_dtype(t) == EMBER_QFLOAT) {
            CU_ASSERT_FATAL(ember_qtensor_to_bytes(t, NULL, 0, &s->len[i]) == EMBER_OK);
            s->bytes[i] = malloc(s->len[i] + 1);
            CU_ASSERT_FATAL(ember_qtensor_to_bytes(t, s->bytes[i], s->len[i], &s->len[i]) ==
                            EMBER_OK);
        } else {
            s->len[i] =
                (size_t)ember_tensor_numel(t) * ember_dtype_get_traits(ember_tensor_dtype(t))->size;
            s->bytes[i] = malloc(s->len[i] + 1);
            CU_ASSERT_FATAL(ember_tensor_read(t, s->bytes[i], s->len[i]) == EMBER_OK);
        }
    }
}

static int snap_same(const env *e, snapshot *s) {
    int same = 1;
    for (int i = 0; i < NIN; i++) {
        if (!s->bytes[i])
            continue;
        snapshot now;
        env one = *e;
        for (int k = 0; k < NIN; k++)
            one.in[k] = k == i ? e->in[i] : NULL;
        snap_take(&one, &now);
        same &= now.len[i] == s->len[i] && memcmp(now.bytes[i], s->bytes[i], s->len[i]) == 0;
        free(now.bytes[i]);
        free(s->bytes[i]);
        s->bytes[i] = NULL;
    }
    return same;
}

static void env_free(env *e) {
    for (int i = 0; i < NIN; i++) {
        ember_tensor_free(e->in[i]);
        e->in[i] = NULL;
    }
    ember_tensor_free(e->out);
    e->out = NULL;
}

/* The context still computes: [1, 2] + [10, 20] on the device. */
static int context_works(ember_context *c, ember_device dev) {
    const int64_t shape[] = {2};
    const float a[] = {1, 2}, b[] = {10, 20};
    float y[2] = {0, 0};
    ember_tensor *ta = NULL, *tb = NULL, *ty = NULL;
    int ok = ember_tensor_from_data(c, dev, EMBER_F32, 1, shape, a, &ta) == EMBER_OK &&
             ember_tensor_from_data(c, dev, EMBER_F32, 1, shape, b, &tb) == EMBER_OK &&
             ember_add(ta, tb, &ty) == EMBER_OK && ember_tensor_read(ty, y, sizeof y) == EMBER_OK &&
             y[0] == 11.0f && y[1] == 22.0f;
    ember_tensor_free(ta);
    ember_tensor_free(tb);
    ember_tensor_free(ty);
    return ok;
}

/* Fail allocation 1, 2, ... of `call` until it succeeds. */
static void walk(const char *name, ember_context *c, ember_device dev, int param, setup_fn setup,
                 call_fn call) {
    env e;
    memset(&e, 0, sizeof e);
    e.ctx = c;
    e.dev = dev;
    e.param = param;
    /* warm the per-context caches */
    CU_ASSERT_EQUAL_FATAL(setup(&e), EMBER_OK);
    ember_status st = call(&e);
    if (st != EMBER_OK) {
        fprintf(stderr, "%s on %s:%d: the call fails without injection: %s\n", name,
                ember_backend_name(dev.backend), dev.index, ember_last_error());
        CU_FAIL(name);
        env_free(&e);
        return;
    }
    env_free(&e);
    walks++;
    for (long n = 1; n < 400; n++) {
        long live = ember__alloc_live();
        CU_ASSERT_EQUAL_FATAL(setup(&e), EMBER_OK);
        snapshot s;
        snap_take(&e, &s);
        e.out = (ember_tensor *)(uintptr_t)1;
        ember_clear_error();
        ember__alloc_fail_at(n);
        st = call(&e);
        ember__alloc_fail_at(0);
        if (e.out == (ember_tensor *)(uintptr_t)1)
            e.out = NULL; /* a call without a tensor output */
        int same = snap_same(&e, &s);
        if (st == EMBER_OK) {
            CU_ASSERT(same || param == -1); /* param -1: the call writes its input (axpy_inplace) */
            env_free(&e);
            CU_ASSERT_EQUAL(ember__alloc_live(), live);
            injected += n - 1;
            return;
        }
        if (st != EMBER_ERR_OUT_OF_MEMORY || e.out != NULL || !same) {
            fprintf(stderr, "%s on %s:%d, allocation %ld failed: %s (%s), out %p, inputs %s\n",
                    name, ember_backend_name(dev.backend), dev.index, n, ember_status_name(st),
                    ember_last_error(), (void *)e.out, same ? "intact" : "CHANGED");
        }
        CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
        CU_ASSERT(ember_last_error()[0] != '\0');
        CU_ASSERT_PTR_NULL(e.out);
        CU_ASSERT(same);
        e.out = NULL;
        env_free(&e);
        if (ember__alloc_live() != live) {
            fprintf(stderr, "%s on %s:%d, allocation %ld failed: %ld block(s) leaked\n", name,
                    ember_backend_name(dev.backend), dev.index, n, ember__alloc_live() - live);
            CU_FAIL("leak");
        }
        CU_ASSERT(context_works(c, dev));
    }
    fprintf(stderr, "%s: never succeeded\n", name);
    CU_FAIL(name);
}

/* ---- setups ---- */
static const int64_t S23[] = {2, 3}, S34[] = {3, 4}, S3[] = {3}, S24[] = {2, 4}, S48[] = {4, 8},
                     S88[] = {8, 8}, S28[] = {2, 8}, S1[] = {1}, S234[] = {2, 3, 4},
                     S143[] = {1, 4, 3}, S4[] = {4};

static ember_status none(env *e) {
    (void)e;
    return EMBER_OK;
}
static ember_status a23(env *e) { return f32(e, 0, 2, S23); }
static ember_status a23_b34(env *e) {
    ember_status st = f32(e, 0, 2, S23);
    return st ? st : f32(e, 1, 2, S34);
}
static ember_status a234_b143(env *e) { /* batched, broadcast */
    ember_status st = f32(e, 0, 3, S234);
    return st ? st : f32(e, 1, 3, S143);
}
static ember_status a23_b3(env *e) {
    ember_status st = f32(e, 0, 2, S23);
    return st ? st : f32(e, 1, 1, S3);
}
static ember_status a23_b23(env *e) {
    ember_status st = f32(e, 0, 2, S23);
    return st ? st : f32(e, 1, 2, S23);
}
static ember_status linear_in(env *e) { /* x [2,3], W [3,4], b [4] */
    ember_status st = f32(e, 0, 2, S23);
    st = st ? st : f32(e, 1, 2, S34);
    return st ? st : f32(e, 2, 1, S4);
}
static ember_status ce_in(env *e) { /* logits [2,3], targets I64 [2] */
    ember_status st = f32(e, 0, 2, S23);
    const int64_t tg[] = {2, 0}, s2[] = {2};
    return st ? st : ember_tensor_from_data(e->ctx, e->dev, EMBER_I64, 1, s2, tg, &e->in[1]);
}
static ember_status x48(env *e) { return f32(e, 0, 2, S48); }
static ember_status q48(env *e) {
    ember_qscheme s = tu_qscheme_sample(e->param);
    return quant(e, 0, 2, S48, &s);
}
/* q_matmul arms: param 0 (Q,Q), 1 (F,Q), 2 (Q,F), 3 (Q,Q) per-block; shapes [2,8] @ [8,8] */
static ember_status qmm_in(env *e) {
    ember_qscheme s = tu_qscheme_sample(e->param == 3 ? 2 : 0);
    ember_status st = e->param == 1 ? f32(e, 0, 2, S28) : quant(e, 0, 2, S28, &s);
    if (st)
        return st;
    return e->param == 2 ? f32(e, 1, 2, S88) : quant(e, 1, 2, S88, &s);
}
/* wide q_matmul (B of 300 columns: two packing tasks): param 0 (Q,Q) [130,8] @ [8,300] (over
 * 128 rows: no unpacked first call, B is packed), 2 (Q,F) [2,8] @ [8,300] */
static ember_status qmm_wide_in(env *e) {
    ember_qscheme s = tu_qscheme_sample(0);
    const int64_t a[2] = {e->param == 0 ? 130 : 2, 8}, b[2] = {8, 300};
    ember_status st = quant(e, 0, 2, a, &s);
    if (st)
        return st;
    return e->param == 2 ? f32(e, 1, 2, b) : quant(e, 1, 2, b, &s);
}
static ember_status linear_q_in(env *e) { /* x [2,8], quantized W [8,8], bias [8] */
    ember_qscheme s = tu_qscheme_sample(0);
    const int64_t s8[] = {8};
    ember_status st = f32(e, 0, 2, S28);
    st = st ? st : quant(e, 1, 2, S88, &s);
    return st ? st : f32(e, 2, 1, s8);
}
static ember_status static_in(env *e) { /* x [4,8], per-tensor scales [1] */
    ember_status st = f32(e, 0, 2, S48);
    const float sc[] = {0.02f};
    return st ? st : ember_tensor_from_data(e->ctx, e->dev, EMBER_F32, 1, S1, sc, &e->in[1]);
}
static ember_status half_in(env *e) { /* F16 (where held) or BF16 [2,3] and [3,4] */
    uint16_t a[12], b[12];
    for (int i = 0; i < 12; i++) {
        a[i] = (uint16_t)(e->param == EMBER_F16 ? 0x3c00 + i : 0x3f80 + i);
        b[i] = (uint16_t)(e->param == EMBER_F16 ? 0xbc00 + i : 0xbf80 + i);
    }
    ember_status st =
        ember_tensor_from_data(e->ctx, e->dev, (ember_dtype)e->param, 2, S23, a, &e->in[0]);
    return st ? st
              : ember_tensor_from_data(e->ctx, e->dev, (ember_dtype)e->param, 2, S34, b, &e->in[1]);
}

/* ---- calls ---- */
static ember_status c_from_data(env *e) {
    uint64_t data[64];
    memset(data, 0x11, sizeof data);
    return ember_tensor_from_data(e->ctx, e->dev, (ember_dtype)e->param, 2, S24, data, &e->out);
}
static ember_status c_context(env *e) {
    ember_options o = ember_options_default();
    o.enable_opencl = e->param;
    o.num_threads = 2;
    ember_context *c = (ember_context *)(uintptr_t)1;
    ember_status st = ember_context_create(&o, &c);
    if (st != EMBER_OK) {
        CU_ASSERT_PTR_NULL(c);
        return st;
    }
    ember_context_destroy(c);
    return EMBER_OK;
}
static ember_status c_to_device(env *e) {
    ember_device d = {(ember_backend)(e->param >> 8), e->param & 0xff};
    return ember_to_device(e->in[0], d, &e->out);
}
static ember_status c_read(env *e) { return ember_tensor_read(e->in[0], e->buf, sizeof e->buf); }
static ember_status c_read_many(env *e) {
    const ember_tensor *ts[2] = {e->in[0], e->in[1]};
    static unsigned char b0[256], b1[256];
    void *const d[2] = {b0, b1};
    const size_t caps[2] = {sizeof b0, sizeof b1};
    return ember_tensor_read_many(ts, d, caps, 2);
}
static ember_status c_matmul(env *e) { return ember_matmul(e->in[0], e->in[1], &e->out); }
static ember_status c_q_matmul(env *e) { return ember_q_matmul(e->in[0], e->in[1], &e->out); }
static ember_status c_linear(env *e) { return ember_linear(e->in[0], e->in[1], e->in[2], &e->out); }
static ember_status c_add(env *e) { return ember_add(e->in[0], e->in[1], &e->out); }
static ember_status c_mul(env *e) { return ember_mul(e->in[0], e->in[1], &e->out); }
static ember_status c_lxb(env *e) { /* w [3,4], dy [2,4] -> dx [2,3]: use in[1] as w, out of a23 */
    return ember_linear_x_backward(e->in[1], e->in[2], &e->out);
}
static ember_status c_lwb(env *e) {
    return ember_linear_weight_backward(e->in[0], e->in[2], &e->out);
}
static ember_status c_lbb(env *e) { return ember_linear_bias_backward(e->in[0], &e->out); }
static ember_status c_relu(env *e) { return ember_relu(e->in[0], &e->out); }
static ember_status c_relub(env *e) { return ember_relu_backward(e->in[0], e->in[1], &e->out); }
static ember_status c_softmax(env *e) { return ember_softmax(e->in[0], &e->out); }
static ember_status c_ce(env *e) { return ember_cross_entropy(e->in[0], e->in[1], &e->out); }
static ember_status c_ceb(env *e) {
    return ember_cross_entropy_backward(e->in[0], e->in[1], &e->out);
}
static ember_status c_axpy(env *e) { return ember_axpy(0.5f, e->in[0], e->in[1], &e->out); }
static ember_status c_axpy_in(env *e) { return ember_axpy_inplace(0.5f, e->in[0], e->in[1]); }
static ember_status c_argmax(env *e) { return ember_argmax(e->in[0], 1, &e->out); }
static ember_status c_quantize(env *e) {
    ember_qscheme s = tu_qscheme_sample(e->param);
    return ember_quantize(e->in[0], &s, &e->out);
}
static ember_status c_quantize_static(env *e) {
    ember_qscheme s = tu_qscheme_sample(0);
    return ember_quantize_static(e->in[0], &s, e->in[1], &e->out);
}
static ember_status c_dequantize(env *e) { return ember_dequantize(e->in[0], &e->out); }
static ember_status c_dequantize_bf16(env *e) {
    return ember_dequantize_to(e->in[0], EMBER_BF16, &e->out);
}
static ember_status c_backend_deq(env *e) {
    return ember_backend_dequantize(e->ctx, e->dev, e->in[0], &e->out);
}
static ember_status c_qreaders(env *e) {
    int8_t v[64];
    float sc[16], g;
    size_t n = 0, len = 0;
    ember_qscheme s;
    EMBER_TRY(ember_tensor_qscheme(e->in[0], &s));
    EMBER_TRY(ember_qtensor_values(e->in[0], v, sizeof v));
    EMBER_TRY(ember_qtensor_scale_count(e->in[0], &n));
    EMBER_TRY(ember_qtensor_scales(e->in[0], sc, 16));
    if (s.block_rank > 0 && s.tensor_level)
        EMBER_TRY(ember_qtensor_global_scale(e->in[0], &g));
    return ember_qtensor_to_bytes(e->in[0], e->buf, sizeof e->buf, &len);
}
static ember_status c_from_bytes(env *e) {
    size_t len = 0;
    EMBER_TRY(ember_qtensor_to_bytes(e->in[0], e->buf, sizeof e->buf, &len));
    ember_qscheme s = tu_qscheme_sample(e->param);
    return ember_qtensor_from_bytes(e->ctx, e->dev, &s, 2, S48, e->buf, len, &e->out);
}
static ember_status c_requant(env *e) {
    ember_device d = {(ember_backend)(e->param >> 8), e->param & 0xff};
    return ember_requantize_to_device(e->in[0], d, &e->out);
}
static ember_status c_describe(env *e) {
    ember_device_info info;
    int yes = 0;
    ember_qscheme s = tu_qscheme_sample(0);
    EMBER_TRY(ember_device_supports(e->ctx, e->dev, EMBER_OP_Q_MATMUL, EMBER_QFLOAT, &s, &yes));
    return ember_device_describe(e->ctx, e->dev, &info);
}

/* backward ops want w [3,4] and dy [2,4]: in[0] x [2,3], in[1] w [3,4], in[2] dy [2,4] */
static ember_status bw_in(env *e) {
    ember_status st = f32(e, 0, 2, S23);
    st = st ? st : f32(e, 1, 2, S34);
    return st ? st : f32(e, 2, 2, S24);
}

/* ---- the walks, per device ---- */
static void walk_device(ember_device dev) {
    char name[64];
    const ember_dtype dts[] = {EMBER_F32, EMBER_F16, EMBER_BF16, EMBER_I64,
                               EMBER_I32, EMBER_I8,  EMBER_U8,   EMBER_BOOL};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        int held = 0;
        CU_ASSERT_FATAL(ember_device_supports(ctx, dev, EMBER_OP_STORE, dts[i], NULL, &held) ==
                        EMBER_OK);
        if (!held)
            continue;
        snprintf(name, sizeof name, "tensor_from_data %s", ember_dtype_name(dts[i]));
        walk(name, ctx, dev, (int)dts[i], none, c_from_data);
    }
    int ncl = ember_device_count(ctx, EMBER_BACKEND_OPENCL);
    walk("to_device cpu:0", ctx, dev, EMBER_BACKEND_CPU << 8, a23, c_to_device);
    if (ncl > 0)
        walk("to_device opencl:0", ctx, dev, EMBER_BACKEND_OPENCL << 8, a23, c_to_device);
    walk("tensor_read", ctx, dev, 0, a23, c_read);
    walk("tensor_read_many", ctx, dev, 0, a23_b34, c_read_many);
    walk("matmul", ctx, dev, 0, a23_b34, c_matmul);
    walk("matmul batched", ctx, dev, 0, a234_b143, c_matmul);
    walk("matmul BF16", ctx, dev, EMBER_BF16, half_in, c_matmul);
    int f16 = 0;
    ember_device_supports(ctx, dev, EMBER_OP_MATMUL, EMBER_F16, NULL, &f16);
    if (f16)
        walk("matmul F16", ctx, dev, EMBER_F16, half_in, c_matmul);
    walk("linear", ctx, dev, 0, linear_in, c_linear);
    walk("linear quantized W", ctx, dev, 0, linear_q_in, c_linear);
    walk("add", ctx, dev, 0, a23_b3, c_add);
    walk("mul", ctx, dev, 0, a23_b3, c_mul);
    walk("linear_x_backward", ctx, dev, 0, bw_in, c_lxb);
    walk("linear_weight_backward", ctx, dev, 0, bw_in, c_lwb);
    walk("linear_bias_backward", ctx, dev, 0, a23, c_lbb);
    walk("relu", ctx, dev, 0, a23, c_relu);
    walk("relu_backward", ctx, dev, 0, a23_b23, c_relub);
    walk("softmax", ctx, dev, 0, a23, c_softmax);
    walk("cross_entropy", ctx, dev, 0, ce_in, c_ce);
    walk("cross_entropy_backward", ctx, dev, 0, ce_in, c_ceb);
    walk("axpy", ctx, dev, 0, a23_b23, c_axpy);
    walk("axpy_inplace", ctx, dev, -1, a23_b23, c_axpy_in);
    walk("argmax", ctx, dev, 0, a23, c_argmax);
    for (int k = 0; k < 6; k++) {
        snprintf(name, sizeof name, "quantize scheme %d", k);
        walk(name, ctx, dev, k, x48, c_quantize);
        snprintf(name, sizeof name, "dequantize scheme %d", k);
        walk(name, ctx, dev, k, q48, c_dequantize);
        snprintf(name, sizeof name, "quantized readers scheme %d", k);
        walk(name, ctx, dev, k, q48, c_qreaders);
        snprintf(name, sizeof name, "qtensor_from_bytes scheme %d", k);
        walk(name, ctx, dev, k, q48, c_from_bytes);
    }
    walk("quantize_static", ctx, dev, 0, static_in, c_quantize_static);
    walk("dequantize_to BF16", ctx, dev, 0, q48, c_dequantize_bf16);
    walk("backend_dequantize", ctx, dev, 0, q48, c_backend_deq);
    walk("requantize_to_device cpu:0", ctx, dev, EMBER_BACKEND_CPU << 8, q48, c_requant);
    if (ncl > 0)
        walk("requantize_to_device opencl:0", ctx, dev, EMBER_BACKEND_OPENCL << 8, q48, c_requant);
    for (int arm = 0; arm < 4; arm++) {
        snprintf(name, sizeof name, "q_matmul arm %d", arm);
        walk(name, ctx, dev, arm, qmm_in, c_q_matmul);
        snprintf(name, sizeof name, "q_matmul arm %d, propagation", arm);
        walk(name, ctx_prop, dev, arm, qmm_in, c_q_matmul);
    }
    walk("q_matmul (F,Q), dynamic activation quantization", ctx_dyn, dev, 1, qmm_in, c_q_matmul);
    walk("q_matmul, wide B packed on first use", ctx, dev, 0, qmm_wide_in, c_q_matmul);
    walk("q_matmul (Q,F) dynamic, wide B", ctx_dyn, dev, 2, qmm_wide_in, c_q_matmul);
    walk("matmul routed to q_matmul", ctx, dev, 2, qmm_in, c_matmul);
    walk("device_describe + device_supports", ctx, dev, 0, none, c_describe);
}

static void test_cpu(void) { walk_device(TU_CPU); }

static void test_opencl(void) {
    if (ember_device_count(ctx, EMBER_BACKEND_OPENCL) == 0) {
        printf("(no OpenCL device: skipped) ");
        return;
    }
    walk_device((ember_device){EMBER_BACKEND_OPENCL, 0});
}

static void test_context_create(void) {
    walk("context_create (CPU only)", ctx, TU_CPU, 0, none, c_context);
    if (ember_device_count(ctx, EMBER_BACKEND_OPENCL) > 0)
        walk("context_create (with OpenCL)", ctx, TU_CPU, 1, none, c_context);
}

/* The calls documented (or expected) to allocate nothing: with every allocation failing they
 * still succeed, and the allocator sees no request. The check functions in particular are the
 * op's guards "without doing any work or allocating" (API.md). */
static void test_no_allocation(void) {
    env e;
    memset(&e, 0, sizeof e);
    e.ctx = ctx;
    e.dev = TU_CPU;
    CU_ASSERT_FATAL(qmm_in(&e) == EMBER_OK); /* in[0] Q [2,8], in[1] Q [8,8], param 0 */
    ember_tensor *x = NULL;
    CU_ASSERT_FATAL(f32(&e, 2, 2, S23) == EMBER_OK);
    x = e.in[2];
    ember_qscheme s = tu_qscheme_sample(2), back;
    size_t n = 0;
    ember_device_info info;
    ember__alloc_fail_at(1); /* any allocation from here fails, and is counted */
    CU_ASSERT_EQUAL(ember_check_q_matmul(e.in[0], e.in[1]), EMBER_OK);
    CU_ASSERT_EQUAL(ember_check_q_matmul(x, e.in[1]), EMBER_ERR_SHAPE_MISMATCH);
    CU_ASSERT_EQUAL(ember_check_to_device(x, TU_CPU), EMBER_OK);
    ember_status ck = ember_check_to_device(e.in[0], TU_CPU); /* compared with the op below */
    CU_ASSERT_EQUAL(ember_qscheme_validate(&s), EMBER_OK);
    CU_ASSERT_EQUAL(ember_tensor_qscheme(e.in[0], &back), EMBER_OK);
    CU_ASSERT_EQUAL(ember_qtensor_scale_count(e.in[0], &n), EMBER_OK);
    CU_ASSERT_EQUAL(ember_tensor_set_autodiff(x, EMBER_AUTODIFF_BALANCED), EMBER_OK);
    CU_ASSERT_EQUAL(ember_tensor_autodiff(x), EMBER_AUTODIFF_BALANCED);
    CU_ASSERT_EQUAL(ember_tensor_rank(x), 2);
    CU_ASSERT_EQUAL(ember_tensor_dim(x, 1), 3);
    CU_ASSERT_EQUAL(ember_tensor_numel(x), 6);
    CU_ASSERT_EQUAL(ember_tensor_dtype(e.in[0]), EMBER_QFLOAT);
    CU_ASSERT_PTR_EQUAL(ember_tensor_context(x), ctx);
    CU_ASSERT(ember_device_count(ctx, EMBER_BACKEND_CPU) == 1);
    CU_ASSERT_EQUAL(ember_device_describe(ctx, TU_CPU, &info), EMBER_OK);
    CU_ASSERT_EQUAL(ember_tensor_from_data(NULL, TU_CPU, EMBER_F32, 2, S23, NULL, &e.out),
                    EMBER_ERR_MISUSE);
    CU_ASSERT(ember_last_error()[0] != '\0'); /* recording a failure allocates nothing */
    CU_ASSERT(strcmp(ember_status_name(EMBER_ERR_DEVICE), "EMBER_ERR_DEVICE") == 0);
    ember_clear_error();
    CU_ASSERT_EQUAL(ember__alloc_count(), 0);
    ember__alloc_fail_at(0);
    e.out = NULL;
    CU_ASSERT_EQUAL(ember_to_device(e.in[0], TU_CPU, &e.out), ck);
    env_free(&e);
}

int main(void) {
    CU_TestInfo tests[] = {
        {"every call on the CPU", test_cpu},
        {"every call on OpenCL device 0", test_opencl},
        {"context_create", test_context_create},
        {"calls that allocate nothing", test_no_allocation},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"allocation failures", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_alloc_fail", suites);
}
